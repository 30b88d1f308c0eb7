//! Floods of waiters: a client host of its own (`flood`, which the nemesis's link faults leave
//! alone, so that what it measures is its own doing) holds a lock while a few hundred
//! `lock_until` callers on its one manager wait behind it, a third of them dropped at a random
//! await point, then lets them through one by one. What the library keeps for them must stay
//! bounded and go away once they are gone:
//!
//! * `task-flood`: the tasks alive on the host's runtime while they wait do not grow with the
//!   waiters while every master answers (`FLOOD_TASKS` above the count before; seen: 7 to 24
//!   for 300 waiters). While a master is down or paused, a round decided without it leaves its
//!   request to it to finish in a task of its own for up to the node timeout, so the tasks
//!   follow the waiters' rounds in flight: then a few per waiter (`FLOOD_TASKS_FAULTED`;
//!   seen: 124);
//! * `task-leak`: the tasks alive on the host's runtime (the library's connection drivers,
//!   cleanups, subscriber) come back to what they were before the flood, within `SETTLE`;
//! * `connection-flood`: the host never holds more connections on a master than its pool and
//!   the pub/sub connection of notified hand-offs, however many callers wait;
//! * `subscription-leak`: once the last waiter is gone, the host is subscribed to nothing;
//! * `memory-flood`: what the manager keeps for its callers ([`quorumlock::Footprint`]) follows
//!   the waiters, not the time they wait: at most one place in line each, on one channel, a
//!   round and a cleanup in flight each on every master (more only while a master does not
//!   answer: then up to the transport's bound of unanswered requests per connection);
//! * `memory-leak`: once the tasks are back, nothing of it is left: no channel, no waiter, no
//!   remembered release, no request awaiting a reply (unless a master does not answer).
//!
//! The waiters' grants are holds like any other: mutual exclusion judges them too.

use std::rc::Rc;
use std::time::Duration;

use quorumlock::Footprint;

use super::checker::Granted;
use super::history::Kind;
use super::host::now;
use super::workload::{cancellable, Client};
use crate::seed::SeedRng;

/// The turmoil host name of the flood's client.
pub const HOST: &str = "flood";
/// The lock the waiters wait for.
const RESOURCE: &str = "flood";
/// Callers waiting at once in one flood.
const WAITERS: u64 = 300;
/// How long after the last waiter ended the library's tasks may take to wind down: cleanups
/// wait for the node timeout (50 ms), an unanswered connect for the connect timeout (200 ms),
/// a paused master's reply for its pause (2 s at most).
const SETTLE: Duration = Duration::from_secs(3);
/// Tasks above the count before the flood that a fault elsewhere may explain (a reconnect to
/// a master that crashed meanwhile, a cleanup still waiting on a paused one): a few per
/// master, never one per waiter.
const TASK_SLACK: usize = 12;
/// Tasks above the count before the flood that the waiters may cost while every master answers.
const FLOOD_TASKS: usize = 64;
/// Tasks above the count before the flood that the waiters may cost while a master is down or
/// paused: for each, its round's finisher and cleanup, and its previous round's still running.
const FLOOD_TASKS_FAULTED: usize = 4 * WAITERS as usize;
/// Connections one manager may hold on a master: its pool and the pub/sub connection.
const MAX_CONNECTIONS: usize = quorumlock::defaults::CONNECTIONS_PER_NODE + 1;
/// Requests one waiter may have awaiting replies on one master while it answers: its round
/// and the previous round's cleanup.
const REQUESTS_PER_WAITER: usize = 2;
/// Release ids a channel remembers (the library's bound; the flood waits on one channel).
const RECENT_RELEASES: usize = 16;
/// The most bytes one queued lock request takes (a round's script call with its keys).
const REQUEST_BYTES: usize = 1024;

/// The flood host's software: a flood every few seconds until the stop time.
pub async fn run(client: Rc<Client>, mut rng: SeedRng) -> turmoil::Result {
    let locks = client.manager()?;
    let me = format!("{}:", turmoil::lookup(HOST));
    // After the provisioning (client 0's first step), and with connections open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while now() + Duration::from_secs(4) < client.stop_at {
        if let Ok(guard) = locks.try_lock(RESOURCE, Duration::from_millis(300)).await {
            let _ = guard.release().await;
        }
        let before = alive_tasks();
        let started = now();
        let (peak, most) = flood(&client, &locks, &me, &mut rng).await;
        // A master down or paused during the flood, or lately (its connections' requests wait
        // for the node timeout, its reconnection for the connect timeout).
        let faulted = client.served.iter().any(|m| {
            m.down_until.get().max(m.paused_until.get()) + Duration::from_millis(500) >= started
        });
        let bound = if faulted {
            FLOOD_TASKS_FAULTED
        } else {
            FLOOD_TASKS
        };
        if peak > before + bound {
            client.history.borrow_mut().violation(
                now(),
                "task-flood",
                format_args!("{peak} tasks alive in a flood of {WAITERS} waiters, {before} before"),
            );
        }
        memory_bounded(&client, most, faulted);
        settle(&client, &locks, &me, before).await;
        tokio::time::sleep(Duration::from_millis(500 + rng.below(2000))).await;
    }
    Ok(())
}

/// One flood: a holder, [`WAITERS`] callers behind it, each let through in turn. Returns the
/// most tasks seen alive meanwhile, and the most of each part of the manager's footprint.
async fn flood(
    client: &Rc<Client>,
    locks: &quorumlock::Redlock,
    me: &str,
    rng: &mut SeedRng,
) -> (usize, Footprint) {
    let started = now();
    let holder = locks
        .try_lock(RESOURCE, Duration::from_millis(400))
        .await
        .ok();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| {
            let ttl = Duration::from_millis(20 + rng.below(80));
            let patience = Duration::from_millis(300 + rng.below(2500));
            let drop_after = rng
                .one_in(3)
                .then(|| Duration::from_micros(rng.below(600_000)));
            let hold = Duration::from_millis(rng.below(3));
            let locks = locks.clone();
            let client = Rc::clone(client);
            tokio::task::spawn_local(async move {
                let deadline = tokio::time::Instant::now().into_std() + patience;
                let asked = now();
                let got = cancellable(drop_after, locks.lock_until(RESOURCE, ttl, deadline)).await;
                let Some(Ok(guard)) = got else {
                    return;
                };
                let grant = Granted::of_rounds(asked, ttl, guard.remaining());
                let holds = client.granted(Kind::Lock, &[RESOURCE.into()], grant, guard.fence());
                tokio::time::sleep(hold).await;
                client.end(&holds);
                let _ = guard.release().await;
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut peak = alive_tasks();
    let mut most = quorumlock::footprint(locks);
    connections_bounded(client, me);
    if let Some(guard) = holder {
        let _ = guard.release().await;
    }
    for waiter in waiters {
        let _ = waiter.await;
        peak = peak.max(alive_tasks());
        most = at_most_each(most, quorumlock::footprint(locks));
        connections_bounded(client, me);
    }
    client.history.borrow_mut().event(
        now(),
        format_args!(
            "flood of {WAITERS} waiters over in {}ms, {peak} tasks at most, {} waiters and {} \
             requests in the manager at most",
            (now() - started).as_millis(),
            most.waiters,
            most.requests,
        ),
    );
    (peak, most)
}

/// The larger of each part.
fn at_most_each(a: Footprint, b: Footprint) -> Footprint {
    Footprint {
        channels: a.channels.max(b.channels),
        waiters: a.waiters.max(b.waiters),
        recent_releases: a.recent_releases.max(b.recent_releases),
        requests: a.requests.max(b.requests),
        queued_bytes: a.queued_bytes.max(b.queued_bytes),
        reentrant_holds: a.reentrant_holds.max(b.reentrant_holds),
    }
}

/// `memory-flood`: the most the manager kept during a flood (`most`) follows its waiters.
/// While a master did not answer (`faulted`), each connection to it may also pile up to the
/// transport's bound of unanswered requests.
fn memory_bounded(client: &Client, most: Footprint, faulted: bool) {
    let masters = client.served.len();
    let waiters = WAITERS as usize;
    let mut requests = masters * waiters * REQUESTS_PER_WAITER;
    if faulted {
        requests += masters
            * quorumlock::defaults::CONNECTIONS_PER_NODE
            * quorumlock::defaults::MAX_UNANSWERED;
    }
    let over = [
        ("channels", most.channels, 1),
        ("waiters", most.waiters, waiters),
        ("remembered releases", most.recent_releases, RECENT_RELEASES),
        ("requests awaiting replies", most.requests, requests),
        ("queued bytes", most.queued_bytes, requests * REQUEST_BYTES),
        ("reentrant holds", most.reentrant_holds, 0),
    ];
    for (what, seen, bound) in over {
        if seen > bound {
            client.history.borrow_mut().violation(
                now(),
                "memory-flood",
                format_args!("{seen} {what} in the manager in a flood of {WAITERS} waiters"),
            );
        }
    }
}

/// After a flood: the tasks come back to `before` (within [`TASK_SLACK`]), the host's
/// subscriptions to none, and the manager's footprint to nothing ([`keeps_anything`]), within
/// `SETTLE`.
async fn settle(client: &Client, locks: &quorumlock::Redlock, me: &str, before: usize) {
    let deadline = now() + SETTLE;
    loop {
        let tasks = alive_tasks();
        let channels: usize = client
            .served
            .iter()
            .map(|m| m.master.borrow().held_by(me).1)
            .sum();
        let left = quorumlock::footprint(locks);
        let kept = keeps_anything(client, &left);
        if tasks <= before + TASK_SLACK && channels == 0 && !kept {
            return;
        }
        if now() >= deadline {
            let mut history = client.history.borrow_mut();
            if kept {
                history.violation(
                    now(),
                    "memory-leak",
                    format_args!("the manager still keeps {left:?} {SETTLE:?} after a flood"),
                );
            }
            if tasks > before + TASK_SLACK {
                history.violation(
                    now(),
                    "task-leak",
                    format_args!("{tasks} tasks alive {SETTLE:?} after a flood, {before} before"),
                );
            }
            if channels > 0 {
                history.violation(
                    now(),
                    "subscription-leak",
                    format_args!("{channels} channels still subscribed {SETTLE:?} after a flood"),
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the manager still keeps something for the flood (`memory-leak` if it lasts). A
/// request may still await a master that does not answer (paused, down, or lately: its
/// replies or the connection's end are on their way).
fn keeps_anything(client: &Client, left: &Footprint) -> bool {
    let unanswering = client
        .served
        .iter()
        .any(|s| s.paused_until.get().max(s.down_until.get()) + Duration::from_millis(500) > now());
    let requests_left = !unanswering && (left.requests > 0 || left.queued_bytes > 0);
    left.channels > 0 || left.waiters > 0 || left.recent_releases > 0 || requests_left
}

/// No master holds more than [`MAX_CONNECTIONS`] of this host's connections. A master paused
/// or down lately is not asked: it has not read the closes of the connections the client gave
/// up on while it did not answer (a real `redis-server` under `SIGSTOP` lists them too), and a
/// crashed one keeps its list as it was until it restarts.
fn connections_bounded(client: &Client, me: &str) {
    for (m, served) in client.served.iter().enumerate() {
        let unanswering = served.paused_until.get().max(served.down_until.get());
        if unanswering + Duration::from_millis(100) > now() {
            continue;
        }
        let (connections, _) = served.master.borrow().held_by(me);
        if connections > MAX_CONNECTIONS {
            client.history.borrow_mut().violation(
                now(),
                "connection-flood",
                format_args!("{connections} connections of the flood's host on m{m}"),
            );
        }
    }
}

/// Tasks alive on this host's runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}
