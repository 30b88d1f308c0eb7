//! The faults on the servers, each with the reading that shows it took effect: a paused
//! server is in state `T` and stops answering; a crashed one is gone, then serves again under
//! a new pid; a member that lost its data was started on an empty directory; a leader cut off
//! from the other members is replaced by one of them.

use std::time::{Duration, Instant};

use jepsen_lite::evidence::process_stopped;
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
                    Err("the members were not started to be cut apart".to_owned()),
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
        Fault::PacketLoss => {
            let ports = servers.ports();
            (
                super::loss::packet_loss(&ports, recorder, length).await,
                None,
            )
        }
        Fault::None
        | Fault::ClientPause
        | Fault::Partition
        | Fault::Orphans
        | Fault::ClockBump
        | Fault::ClockBumpMinority => (
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
    let fault = format!(
        "cut {name} (peer ports {:?}) off from the other members",
        peers.ports_of(i)
    );
    let cut = match peers.cut(i) {
        Ok(cut) => cut,
        Err(e) => return (fault, Err(e)),
    };
    recorder.nemesis(
        "partition",
        json!({"node": i, "name": name, "from": "members", "how": "iptables"}),
    );
    let started = Instant::now();
    let mut replaced: Option<(Duration, usize, usize)> = None;
    let mut isolated_view = String::new();
    let give_up = length + ELECTION_WAIT;
    while started.elapsed() < length || (replaced.is_none() && started.elapsed() < give_up) {
        if replaced.is_none() {
            replaced = tokio::task::block_in_place(|| {
                (0..servers.len()).filter(|&j| j != i).find_map(|j| {
                    servers
                        .leader_seen_by(j)
                        .filter(|&k| k != i)
                        .map(|k| (started.elapsed(), j, k))
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
    let dropped = cut.dropped();
    let views: Vec<Option<usize>> = tokio::task::block_in_place(|| {
        (0..servers.len())
            .map(|j| servers.leader_seen_by(j))
            .collect()
    });
    let healed = cut.heal();
    recorder.nemesis("heal", json!({}));
    let lasted = started.elapsed();
    let fault = format!("{fault} for {lasted:.1?}");
    let discarded = match (dropped, healed) {
        (Ok(n), Ok(())) => n,
        (Err(e), _) => return (fault, Err(format!("cannot read the counters: {e}"))),
        (_, Err(e)) => return (fault, Err(format!("the cut could not be removed: {e}"))),
    };
    let reading = match replaced {
        // Cut off both ways, it cannot know who leads the others now, nor serve.
        Some((_, _, k)) if hears_the_others(&isolated_view, k) => Err(format!(
            "the cut-off one still hears the others: {}",
            isolated_view.trim()
        )),
        Some((after, j, k)) if discarded > 0 => Ok(format!(
            "{discarded} packets of its peer connections dropped; after {} ms member {j} \
             named {k} leader; the cut-off one then: {}",
            after.as_millis(),
            isolated_view.trim()
        )),
        Some(_) => Err("a new leader, but the cut dropped no packet".to_owned()),
        None => Err(format!(
            "no other member named a new leader within {give_up:?} ({discarded} packets \
             dropped); who leads as each sees it: {views:?}"
        )),
    };
    (fault, reading)
}

/// Whether what the cut-off member said shows that it still hears the others: it names the
/// leader they elected (etcd), or it serves as a follower or leader (ZooKeeper).
fn hears_the_others(view: &str, new_leader: usize) -> bool {
    let view = view.trim();
    view == format!("names {new_leader} leader") || view == "follower" || view == "leader"
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
