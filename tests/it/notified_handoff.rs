//! Notified hand-offs: a waiter is woken by the holder's release instead of
//! polling, retries when a crashed holder's keys expire, falls back to polling when a
//! notification is lost, leaves no subscription behind when cancelled, and 64 waiters cost the
//! masters a bounded number of commands per release.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::{RedisCluster, Reply};
use support::{builder, calls, cluster, key, wait_until, warm_up, PATIENCE};

/// So long that a poll cannot explain a prompt grant: a waiter that polled would wait a random
/// time below this.
const RETRY_DELAY: Duration = Duration::from_secs(2);

/// Long enough that no key expires during a test unless the test says so.
const TTL: Duration = Duration::from_secs(30);

/// How long a notified hand-off may take on a loaded 2-core box: far below the retry delay
/// (a hand-off is a publish and one round, well under a millisecond unloaded).
const PROMPT: Duration = Duration::from_millis(400);

fn waiting_manager(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls())
        .retry_delay(RETRY_DELAY)
        .retry_count(u32::MAX)
        .build()
        .expect("build manager")
}

/// How many clients subscribe to the release channel of `resource` on each master.
fn subscribers(cluster: &RedisCluster, resource: &str) -> Vec<i64> {
    let channel = key(resource);
    cluster
        .iter()
        .map(
            |master| match master.query(&["PUBSUB", "NUMSUB", &channel]) {
                Ok(Reply::Array(items)) => match items.get(1) {
                    Some(Reply::Integer(n)) => *n,
                    other => panic!("PUBSUB NUMSUB gave {other:?}"),
                },
                other => panic!("PUBSUB NUMSUB gave {other:?}"),
            },
        )
        .collect()
}

/// Waits until every master has `n` subscribers on `resource`'s channel.
async fn wait_subscribers(cluster: &RedisCluster, resource: &str, n: i64) {
    wait_until(&format!("{n} subscribers on {resource}"), PATIENCE, || {
        subscribers(cluster, resource).iter().all(|&s| s == n)
    })
    .await;
}

/// Starts a waiter on `resource`; returns its task, which yields the instant it was granted.
fn spawn_waiter(locks: &Redlock, resource: &str) -> tokio::task::JoinHandle<Instant> {
    let locks = locks.clone();
    let resource = resource.to_string();
    tokio::spawn(async move {
        let guard = locks
            .lock_until(&resource, TTL, Instant::now() + Duration::from_secs(20))
            .await
            .expect("the waiter is granted");
        let at = Instant::now();
        guard.release().await.expect("release");
        at
    })
}

/// A waiter is granted promptly after the holder's release returns: far sooner than the 2 s
/// retry delay could explain, five times in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    for round in 0..5 {
        let guard = holder.lock("r", TTL).await.expect("holder");
        let task = spawn_waiter(&waiter, "r");
        wait_subscribers(&cluster, "r", 1).await;
        // The waiter has subscribed and made its attempt after subscribing: give it time to
        // settle into waiting (the grant below must come from the release, not that attempt).
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.expect("release");
        let released = Instant::now();
        let granted = task.await.expect("waiter task");
        let handoff = granted.saturating_duration_since(released);
        assert!(
            handoff < PROMPT,
            "round {round}: the hand-off took {handoff:?} (retry delay {RETRY_DELAY:?})"
        );
    }
}

/// A guard dropped without `release()` announces its release as `release()` does (its
/// background release is the release of a held lock, not a failed round's cleanup): the
/// waiter is granted promptly, not at its next 2 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_wakes_the_waiter() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    for round in 0..3 {
        let guard = holder.lock("dropped", TTL).await.expect("holder");
        let task = spawn_waiter(&waiter, "dropped");
        wait_subscribers(&cluster, "dropped", 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(guard);
        let dropped = Instant::now();
        let granted = task.await.expect("waiter task");
        let handoff = granted.saturating_duration_since(dropped);
        assert!(
            handoff < PROMPT,
            "round {round}: the hand-off after a drop took {handoff:?} (retry delay {RETRY_DELAY:?})"
        );
    }
}

/// The waiters have made their attempts: waits until a quorum of the masters saw `rounds` more
/// refused acquire-script rounds than `before` (a round decided at the quorum may never send
/// its request to the last master).
async fn wait_script_rounds(cluster: &RedisCluster, before: &[u64], rounds: u64) {
    let quorum = cluster.len() / 2 + 1;
    wait_until("the waiters' attempts", PATIENCE, || {
        cluster
            .iter()
            .zip(before)
            .filter(|(master, before)| calls(master, "pttl") >= *before + rounds)
            .count()
            >= quorum
    })
    .await;
}

/// Each master's count of refused acquire-script rounds (each reads the holder's `PTTL`).
fn pttl_calls(cluster: &RedisCluster) -> Vec<u64> {
    cluster.iter().map(|m| calls(m, "pttl")).collect()
}

/// A subscription killed on every master (`CLIENT KILL TYPE pubsub`) just before the release
/// costs at most one retry delay; killed again, it is restored (resubscribed) and the next
/// release wakes the waiter promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_subscription_costs_at_most_one_retry_delay_and_is_restored() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let kill = || {
        for master in cluster.iter() {
            master
                .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
                .expect("CLIENT KILL");
        }
    };
    for restored in [false, true] {
        let guard = holder.lock("r", TTL).await.expect("holder");
        let before = pttl_calls(&cluster);
        let task = spawn_waiter(&waiter, "r");
        wait_subscribers(&cluster, "r", 1).await;
        wait_script_rounds(&cluster, &before, 1).await;
        kill();
        if restored {
            wait_subscribers(&cluster, "r", 1).await;
        }
        guard.release().await.expect("release");
        let released = Instant::now();
        let granted = task.await.expect("waiter task");
        let handoff = granted.saturating_duration_since(released);
        let bound = if restored {
            PROMPT
        } else {
            RETRY_DELAY + PROMPT
        };
        assert!(
            handoff < bound,
            "restored {restored}: the hand-off took {handoff:?} (bound {bound:?})"
        );
    }
}

/// A release that publishes nothing (the key deleted by hand, as an older client's release
/// or a lost message would leave it) is found by the first waiter's poll within one retry
/// delay: polling stays as the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_notification_is_found_by_polling_within_one_retry_delay() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("r", TTL).await.expect("holder");
    let before = pttl_calls(&cluster);
    let task = spawn_waiter(&waiter, "r");
    wait_script_rounds(&cluster, &before, 1).await;
    for master in cluster.iter() {
        master.command(&["DEL", &key("r")]).expect("DEL");
    }
    let deleted = Instant::now();
    let granted = task.await.expect("waiter task");
    let waited = granted.saturating_duration_since(deleted);
    assert!(
        waited < RETRY_DELAY + PROMPT,
        "found after {waited:?}, more than one retry delay ({RETRY_DELAY:?})"
    );
    drop(guard);
}

/// A waiter that is cancelled (its task aborted while it waits) leaves no subscription on any
/// master, and a later waiter on the same resource subscribes again and is woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_no_subscription() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("r", TTL).await.expect("holder");
    let tasks: Vec<_> = (0..3).map(|_| spawn_waiter(&waiter, "r")).collect();
    wait_subscribers(&cluster, "r", 1).await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        assert!(task.await.expect_err("aborted").is_cancelled());
    }
    wait_subscribers(&cluster, "r", 0).await;
    // The line is empty and unsubscribed, not broken: the next waiter is woken as usual.
    let task = spawn_waiter(&waiter, "r");
    wait_subscribers(&cluster, "r", 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.release().await.expect("release");
    let released = Instant::now();
    let handoff = task
        .await
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(handoff < PROMPT, "the hand-off took {handoff:?}");
    wait_subscribers(&cluster, "r", 0).await;
}

/// A holder that crashed (its guard forgotten: no release, no notification) is succeeded when
/// its keys expire, told by the refusal's `PTTL`, not a retry delay (30 s here) later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_is_succeeded_when_its_keys_expire() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_secs(30))
        .build()
        .expect("build manager");
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let short = Duration::from_millis(1500);
    let acquired = Instant::now();
    std::mem::forget(holder.lock("r", short).await.expect("holder"));
    let task = spawn_waiter(&waiter, "r");
    let granted = task.await.expect("waiter task");
    let expired = acquired + short;
    assert!(
        granted + Duration::from_millis(50) >= expired,
        "granted {:?} before the holder's keys expired",
        expired - granted
    );
    let late = granted.saturating_duration_since(expired);
    assert!(late < PROMPT, "granted {late:?} after the keys expired");
}

/// A paused minority master costs a waiter nothing: its subscription waits for a quorum of
/// masters only, and the hand-off is as prompt as with every master up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_minority_does_not_slow_the_handoff() {
    let mut cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("r", TTL).await.expect("holder");
    cluster[2].pause().expect("pause");
    let started = Instant::now();
    let task = spawn_waiter(&waiter, "r");
    // Wait on the two live masters only (the paused one cannot answer).
    wait_until("subscribed on the live masters", PATIENCE, || {
        cluster.iter().take(2).all(|master| {
            matches!(
                master.query(&["PUBSUB", "NUMSUB", &key("r")]),
                Ok(Reply::Array(items)) if items.get(1) == Some(&Reply::Integer(1))
            )
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.expect("release");
    let released = Instant::now();
    let handoff = task
        .await
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(
        handoff < PROMPT,
        "the hand-off took {handoff:?} with a paused master (waiting began {:?} before)",
        released - started
    );
    cluster[2].resume().expect("resume");
}

/// The client requests one master ran: scripts, plain `SET`s (a script's `SET` comes with its
/// `TIME`), and subscription changes.
fn requests(master: &quorumlock_testkit::RedisMaster) -> u64 {
    let script = calls(master, "evalsha") + calls(master, "eval");
    let plain_set = calls(master, "set").saturating_sub(calls(master, "time"));
    script + plain_set + calls(master, "subscribe") + calls(master, "unsubscribe")
}

/// No thundering herd: 64 waiters in one manager, then 65 hand-offs in a row (each winner
/// releases at once). The stated bound is `1 + 2M` requests per master per release with `M`
/// managers waiting (the release, one woken waiter's round, the cleanup of a losing round):
/// 3 here, where waking every waiter would cost 64. Arriving costs a waiter at most four more
/// (its first round and the round after subscribing, each with the cleanup of a master that
/// had not answered when the round was decided; a waiter that finds others of its manager in
/// line queues without a round), counted from before the waiters start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_waiters_cost_a_bounded_number_of_commands_per_release() {
    const WAITERS: u64 = 64;
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("r", TTL).await.expect("holder");
    let start: Vec<u64> = cluster.iter().map(requests).collect();
    let before = pttl_calls(&cluster);
    let tasks: Vec<_> = (0..WAITERS).map(|_| spawn_waiter(&waiter, "r")).collect();
    wait_script_rounds(&cluster, &before, 1).await;
    guard.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter task");
    }
    let releases = WAITERS + 1;
    // Arrivals, releases, and the subscription and unsubscription.
    let bound = 4 * WAITERS + 3 * releases + 2;
    for (master, start) in cluster.iter().zip(start) {
        let spent = requests(master) - start;
        assert!(
            spent <= bound,
            "port {}: {spent} requests for {WAITERS} waiters and {releases} releases (bound {bound})",
            master.port()
        );
        eprintln!(
            "port {}: {spent} requests for {WAITERS} waiters and {releases} releases",
            master.port()
        );
    }
}

/// Starvation: 16 contenders in 4 managers (4 processes of 4 tasks, say), each taking the lock
/// for a moment and coming back, every one of them is granted; Jain's index is measured in the
/// benchmark, not asserted here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_contenders_all_get_grants() {
    const CONTENDERS: usize = 16;
    const TOTAL: usize = 160;
    let cluster = cluster(3);
    let managers: Vec<Redlock> = (0..4).map(|_| waiting_manager(&cluster)).collect();
    for locks in &managers {
        warm_up(locks, &cluster).await;
    }
    let total = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(60);
    let tasks: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let locks = managers[i % managers.len()].clone();
            let total = Arc::clone(&total);
            tokio::spawn(async move {
                let mut grants = 0usize;
                while total.load(Ordering::Relaxed) < TOTAL && Instant::now() < deadline {
                    let Ok(guard) = locks.lock_until("hot", TTL, deadline).await else {
                        break;
                    };
                    grants += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.expect("release");
                }
                grants
            })
        })
        .collect();
    let mut grants = Vec::new();
    for task in tasks {
        grants.push(task.await.expect("contender"));
    }
    eprintln!("grants per contender: {grants:?}");
    assert!(
        grants.iter().all(|&g| g >= 1),
        "a contender starved: {grants:?}"
    );
}

/// A holder granted on a bare quorum: with its key missing on one master, each waiter's round
/// is granted there and cleaned up. Were that cleanup announced as a release, it would wake
/// the next waiter into the same failed round, thousands of rounds a second while the holder
/// holds. Cleanups are not announced: 8 waiters behind such a holder cost the masters a few
/// requests in a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleanup_of_a_failed_round_wakes_no_one() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("r", TTL).await.expect("holder");
    // The holder keeps a bare quorum: 2 of 3.
    cluster[2].command(&["DEL", &key("r")]).expect("DEL");
    let start: Vec<u64> = cluster.iter().map(requests).collect();
    let tasks: Vec<_> = (0..8).map(|_| spawn_waiter(&waiter, "r")).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (master, start) in cluster.iter().zip(start) {
        let spent = requests(master) - start;
        // Arriving costs a waiter at most 4 requests per master (two rounds and their
        // cleanups): 32. The first in line polls after uniform delays below the 2 s retry
        // delay, each poll a round and its cleanup: k polls fit in the first second with
        // probability 0.5^k / k!, 2% for 3 and 2e-5 for 7. So 6 polls at most (44 requests),
        // where the livelock ran into the thousands.
        assert!(
            spent <= 44,
            "port {}: {spent} requests in the first second of waiting",
            master.port()
        );
    }
    guard.release().await.expect("release");
    for task in tasks {
        task.await.expect("waiter task");
    }
}

/// `lock` keeps its time bound with notified hand-offs: a waiter further back in line spends a
/// retry per retry delay (without a round), so 16 waiters of one manager behind a holder that
/// does not let go all give up, contended, within about `retry_count` retry delays (not one
/// after the other, as they would if only the first in line counted its retries: 16 × 2
/// delays, about 8 s with a 500 ms retry delay). The delay is that long so that the two are
/// seconds apart: with 200 ms, a run under load (a soak and the whole suite on 2 cores) took
/// 3.1 s against a 2 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_gives_up_after_its_retries_even_back_in_line() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_millis(500))
        .retry_count(2)
        .build()
        .expect("build manager");
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let _guard = holder.lock("r", TTL).await.expect("holder");
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.lock("r", TTL).await.map(drop) })
        })
        .collect();
    for task in tasks {
        let outcome = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("lock gave up within its retries")
            .expect("task");
        let error = outcome.expect_err("the holder keeps the lock");
        assert!(error.is_contended(), "{error}");
    }
    // Two retries of at most 500 ms each, plus the rounds, with seconds to spare for a loaded
    // machine; waiters giving up one after the other would take about 8 s.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "gave up after {took:?}");
    wait_subscribers(&cluster, "r", 0).await;
}

/// Regression (seen in the redaction test): an ACL user allowed every key but no channel
/// (Redis 7's default for new users) could not release, since the release script's `PUBLISH`
/// failed after its delete. The announcement is skipped instead: the release succeeds, and a
/// waiter (which cannot subscribe either) finds the lock by polling within one retry delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_permissions_releases_and_waiters_poll() {
    let cluster = cluster(3);
    for master in cluster.iter() {
        master
            .command(&[
                "ACL",
                "SETUSER",
                "bob",
                "on",
                ">pass",
                "~*",
                "+@all",
                "resetchannels",
            ])
            .expect("ACL SETUSER");
    }
    let urls: Vec<String> = cluster
        .iter()
        .map(|m| format!("redis://bob:pass@127.0.0.1:{}", m.port()))
        .collect();
    let locks = || {
        builder(&urls)
            .retry_delay(Duration::from_millis(500))
            .build()
            .expect("build manager")
    };
    let (holder, waiter) = (locks(), locks());
    let guard = holder.lock("r", TTL).await.expect("holder");
    let task = spawn_waiter(&waiter, "r");
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard
        .release()
        .await
        .expect("the release succeeds without its announcement");
    let released = Instant::now();
    let waited = task
        .await
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(
        waited < Duration::from_millis(500) + PROMPT,
        "found after {waited:?}"
    );
}

/// How a holder gives up the lock in [`every_kind_of_release_wakes_the_waiter`].
#[derive(Debug, Clone, Copy)]
enum Ending {
    LeaseReleased,
    LeaseDropped,
    SetReleased,
    SetDropped,
    LeadershipDropped,
}

/// Holds `resource` as `ending` says, and returns what gives it up.
async fn hold(holder: &Redlock, resource: &str, ending: Ending) -> Box<dyn FnOnce() + Send> {
    use quorumlock::{CampaignOptions, LeaseOptions};
    let lease = || LeaseOptions::new().ttl(TTL);
    match ending {
        Ending::LeaseReleased | Ending::LeaseDropped => {
            let lease = holder
                .lock(resource, TTL)
                .await
                .expect("holder")
                .keep_alive(lease())
                .expect("keep alive");
            if matches!(ending, Ending::LeaseDropped) {
                return Box::new(move || drop(lease));
            }
            Box::new(move || {
                tokio::spawn(async move { lease.release().await.expect("release") });
            })
        }
        Ending::SetReleased | Ending::SetDropped => {
            let set = holder
                .set(&[resource, "other"])
                .lock(TTL)
                .await
                .expect("holder");
            if matches!(ending, Ending::SetDropped) {
                return Box::new(move || drop(set));
            }
            Box::new(move || {
                tokio::spawn(async move { set.release().await.expect("release") });
            })
        }
        Ending::LeadershipDropped => {
            let opts = CampaignOptions::new().lease(lease());
            let leadership = holder
                .election(resource)
                .campaign("host-a", opts)
                .await
                .expect("elected");
            Box::new(move || drop(leadership))
        }
    }
}

/// Every release of a held lock wakes the waiter at once, whatever held it (a lease, a set, a
/// leadership) and however it ended (released, or dropped): none is mistaken for a failed
/// round's cleanup, which announces nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_release_wakes_the_waiter() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    for ending in [
        Ending::LeaseReleased,
        Ending::LeaseDropped,
        Ending::SetReleased,
        Ending::SetDropped,
        Ending::LeadershipDropped,
    ] {
        let resource = format!("{ending:?}");
        let end = hold(&holder, &resource, ending).await;
        let task = spawn_waiter(&waiter, &resource);
        wait_subscribers(&cluster, &resource, 1).await;
        // Let the waiter settle into waiting after its first attempt.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ended = Instant::now();
        end();
        let handoff = task
            .await
            .expect("waiter task")
            .saturating_duration_since(ended);
        assert!(
            handoff < PROMPT,
            "{ending:?}: the hand-off took {handoff:?} (retry delay {RETRY_DELAY:?})"
        );
    }
}
