//! The faults on the servers, each with the reading that shows it took effect: a paused
//! server is in state `T` and stops answering; a crashed one is gone, then serves again under
//! a new pid; a member that lost its data was started on an empty directory; a leader cut off
//! from the other members is replaced by one of them.

use std::time::{Duration, Instant};

use jepsen_lite::evidence::process_stopped;
use quorumlock_testkit::Mode;
use serde_json::json;

use super::cells::Fault;
use super::lost_data;
use super::peers::PeerLinks;
use super::servers::Servers;
use super::workload::{Made, Recorder};

/// How long a crashed server stays down before its restart.
const DOWN: Duration = Duration::from_millis(500);
/// How often the members are asked who leads while one is cut off.
const POLL: Duration = Duration::from_millis(200);
/// How much longer than asked a cut may last while the others have not yet elected a leader:
/// ZooKeeper's followers give up on a leader after `syncLimit` ticks (2 s here), then elect
/// and sync, slowly on two shared cores.
const ELECTION_WAIT: Duration = Duration::from_secs(15);

/// Makes `fault` on the servers (a pause or a partition between members lifted after
/// `length`; the latter needs the `peers` links); returns the fault and its reading, and a
/// note when the servers did not come back as expected.
///
/// Must run on a multi-threaded runtime: the servers' kits are synchronous.
pub(super) async fn strike(
    fault: Fault,
    servers: &mut Servers,
    peers: Option<&PeerLinks>,
    recorder: &Recorder,
    length: Duration,
) -> (Made, Option<String>) {
    match fault {
        Fault::MemberPartition => match peers {
            Some(peers) => (isolate_leader(servers, peers, recorder, length).await, None),
            None => (
                (
                    fault.label().to_owned(),
                    Err("the members' traffic does not go through the proxy".to_owned()),
                ),
                None,
            ),
        },
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
            let marked = servers
                .data_dir(i)
                .ok_or_else(|| format!("{name} has no data directory"))
                .and_then(|dir| lost_data::mark(&dir));
            recorder.nemesis("crash", json!({"node": i, "name": name, "data": "lost"}));
            let restarted = tokio::task::block_in_place(|| servers.restart_empty(i));
            recorder.nemesis("restart", json!({"node": i}));
            recorder.nemesis("heal", json!({}));
            let after = servers.pid(i);
            let lost = lost_data::lost(&marked).map(|deleted| {
                format!(
                    "pid {} killed, {deleted}",
                    before.map_or("?".to_owned(), |p| p.to_string())
                )
            });
            match restarted {
                Ok(()) => (
                    (
                        format!("{name} loses its data"),
                        lost.map(|lost| {
                            format!(
                                "{lost}, rejoined empty as pid {}",
                                after.map_or("?".to_owned(), |p| p.to_string())
                            )
                        }),
                    ),
                    None,
                ),
                // The member is down without its data: the fault happened; that it could not
                // rejoin is the subject's answer, noted on the page.
                Err(e) => (
                    (format!("{name} loses its data"), lost),
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

/// Cuts the leader off from the other members for `length`, and longer (up to
/// [`ELECTION_WAIT`] more) until another leader is elected; the reading is that leader and
/// what the cut-off one says then.
async fn isolate_leader(
    servers: &Servers,
    peers: &PeerLinks,
    recorder: &Recorder,
    length: Duration,
) -> Made {
    let i = tokio::task::block_in_place(|| servers.target());
    let name = tokio::task::block_in_place(|| servers.name(i));
    let before = peers.affected(i);
    peers.set_member(i, Mode::Blackhole);
    recorder.nemesis(
        "partition",
        json!({"node": i, "name": name, "from": "members"}),
    );
    let cut = Instant::now();
    let mut replaced: Option<(Duration, usize, usize)> = None;
    let mut isolated_view = String::new();
    let give_up = length + ELECTION_WAIT;
    while cut.elapsed() < length || (replaced.is_none() && cut.elapsed() < give_up) {
        if replaced.is_none() {
            replaced = tokio::task::block_in_place(|| {
                (0..servers.len()).filter(|&j| j != i).find_map(|j| {
                    servers
                        .leader_seen_by(j)
                        .filter(|&k| k != i)
                        .map(|k| (cut.elapsed(), j, k))
                })
            });
            if replaced.is_some() {
                isolated_view = tokio::task::block_in_place(|| match servers {
                    Servers::Zookeeper(e) => e[i].mode().unwrap_or_else(|e| e),
                    _ => match servers.leader_seen_by(i) {
                        Some(k) if k == i => "still names itself leader".to_owned(),
                        Some(k) => format!("names {k} leader"),
                        None => "names no leader".to_owned(),
                    },
                });
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let discarded = peers.affected(i).saturating_sub(before);
    let views: Vec<Option<usize>> = tokio::task::block_in_place(|| {
        (0..servers.len())
            .map(|j| servers.leader_seen_by(j))
            .collect()
    });
    peers.set_member(i, Mode::Pass);
    recorder.nemesis("heal", json!({}));
    let reading = match replaced {
        Some((after, j, k)) if discarded > 0 => Ok(format!(
            "{discarded} bytes of its peer links discarded; after {} ms member {j} named \
             {k} leader; the cut-off one then: {}",
            after.as_millis(),
            isolated_view.trim()
        )),
        Some(_) => Err("a new leader, but nothing crossed the cut links".to_owned()),
        None => Err(format!(
            "no other member named a new leader within {give_up:?} ({discarded} bytes \
             discarded); who leads as each sees it: {views:?}"
        )),
    };
    let lasted = cut.elapsed();
    (
        format!("cut {name} off from the other members for {lasted:.1?}"),
        reading,
    )
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
