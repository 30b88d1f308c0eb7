//! The faults on the servers, each with the reading that shows it took effect: a paused
//! server is in state `T` and stops answering; a crashed one is gone, then serves again under
//! a new pid; a member that lost its data was started on an empty directory.

use std::time::Duration;

use jepsen_lite::evidence::process_stopped;
use serde_json::json;

use super::cells::Fault;
use super::servers::Servers;
use super::workload::{Made, Recorder};

/// How long a crashed server stays down before its restart.
const DOWN: Duration = Duration::from_millis(500);

/// Makes `fault` on the servers (a pause lifted after `length`); returns the fault and its
/// reading, and a note when the servers did not come back as expected.
///
/// Must run on a multi-threaded runtime: the servers' kits are synchronous.
pub(super) async fn strike(
    fault: Fault,
    servers: &mut Servers,
    recorder: &Recorder,
    length: Duration,
) -> (Made, Option<String>) {
    match fault {
        Fault::ServerPause => {
            let i = tokio::task::block_in_place(|| servers.target());
            let name = tokio::task::block_in_place(|| servers.name(i));
            let pid = servers.pid(i);
            let paused = tokio::task::block_in_place(|| servers.pause(i));
            recorder.nemesis("pause", json!({"node": i, "name": name}));
            let reading = paused.and_then(|()| {
                let stopped = process_stopped(pid.ok_or("no pid")?)?;
                match tokio::task::block_in_place(|| servers.probe(i)) {
                    Ok(()) => Err(format!("{stopped}, but it still answers")),
                    Err(e) => Ok(format!("{stopped}; a probe got: {e}")),
                }
            });
            tokio::time::sleep(length).await;
            let resumed = tokio::task::block_in_place(|| servers.resume(i));
            recorder.nemesis("resume", json!({"node": i}));
            recorder.nemesis("heal", json!({}));
            (
                (format!("pause {name} for {length:?}"), reading),
                resumed.err().map(|e| format!("resume failed: {e}")),
            )
        }
        Fault::ServerCrash => {
            let i = tokio::task::block_in_place(|| servers.target());
            let name = tokio::task::block_in_place(|| servers.name(i));
            let before = servers.pid(i);
            let killed = tokio::task::block_in_place(|| servers.kill(i));
            recorder.nemesis("crash", json!({"node": i, "name": name}));
            let gone = killed.and_then(|()| {
                let pid = before.ok_or("no pid before the crash")?;
                if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    return Err(format!("pid {pid} still exists"));
                }
                match tokio::task::block_in_place(|| servers.probe(i)) {
                    Ok(()) => Err(format!("pid {pid} gone, but the port still answers")),
                    Err(e) => Ok(format!("pid {pid} gone; a probe got: {e}")),
                }
            });
            tokio::time::sleep(DOWN).await;
            let restarted = tokio::task::block_in_place(|| servers.restart(i));
            recorder.nemesis("restart", json!({"node": i}));
            recorder.nemesis("heal", json!({}));
            let after = servers.pid(i);
            let reading = match (gone, &restarted) {
                (Ok(gone), Ok(())) => Ok(format!(
                    "{gone}; restarted with its data as pid {}",
                    after.map_or("?".to_owned(), |p| p.to_string())
                )),
                (Ok(gone), Err(e)) => Err(format!("{gone}; the restart failed: {e}")),
                (Err(e), _) => Err(e),
            };
            ((format!("crash {name} and restart it"), reading), None)
        }
        Fault::DataLoss => {
            let i = tokio::task::block_in_place(|| servers.follower());
            let name = tokio::task::block_in_place(|| servers.name(i));
            let before = servers.pid(i);
            recorder.nemesis("crash", json!({"node": i, "name": name, "data": "lost"}));
            let restarted = tokio::task::block_in_place(|| servers.restart_empty(i));
            recorder.nemesis("restart", json!({"node": i}));
            recorder.nemesis("heal", json!({}));
            let after = servers.pid(i);
            let pids = format!(
                "pid {} killed, its data deleted",
                before.map_or("?".to_owned(), |p| p.to_string())
            );
            match restarted {
                Ok(()) => (
                    (
                        format!("{name} loses its data"),
                        Ok(format!(
                            "{pids}, rejoined empty as pid {}",
                            after.map_or("?".to_owned(), |p| p.to_string())
                        )),
                    ),
                    None,
                ),
                // The member is down without its data: the fault happened; that it could not
                // rejoin is the subject's answer, noted on the page.
                Err(e) => (
                    (format!("{name} loses its data"), Ok(pids)),
                    Some(format!("the member did not rejoin: {}", gist(&e))),
                ),
            }
        }
        Fault::None | Fault::ClientPause | Fault::Partition => (
            (
                fault.label().to_owned(),
                Err("not a fault of the servers".to_owned()),
            ),
            None,
        ),
    }
}

/// The first line of a server's error and the last line of its log tail, shortened.
fn gist(text: &str) -> String {
    let first = text.lines().next().unwrap_or(text);
    let last: String = text
        .lines()
        .last()
        .unwrap_or("")
        .chars()
        .take(300)
        .collect();
    if last == first {
        first.to_owned()
    } else {
        format!("{first} … {last}")
    }
}
