//! Notified hand-offs delivered: a host of its own (`handoff`, which the nemesis's link faults
//! leave alone) holds a lock while a waiter on a second manager waits for it with
//! `lock_until`, then releases it. The waiter's manager polls only below `POLL_BELOW` (2 s):
//! woken by the release's announcement it is granted within a few round trips, left to its
//! poll (or the holder's TTL running out) it is not. So:
//!
//! * `handoff-missed`: where no fault touched a whole master from `QUIET_BEFORE` before the
//!   waiter was called until it returned, the waiter is granted within [`HANDOFF_BOUND`] of the
//!   holder's `release()` returning.
//!
//! Every other waiter in the world polls below 50 ms, so a release announced and never heard
//! costs them at most a poll's delay, which no other checker can tell from contention. The
//! holds are holds like any other: mutual exclusion judges them too.

use std::rc::Rc;
use std::time::Duration;

use super::checker::Granted;
use super::history::Kind;
use super::host::now;
use super::workload::{Client, MAX_TTL};
use crate::seed::SeedRng;

/// The turmoil host name of the hand-off probe.
pub const HOST: &str = "handoff";
/// The lock handed off.
const RESOURCE: &str = "handoff";
/// The waiter's manager polls below this (its retry delay): far above [`HANDOFF_BOUND`], so a
/// grant within the bound is a wake, not a poll (a poll lands within it about one time in ten).
const POLL_BELOW: Duration = Duration::from_secs(2);
/// How long after the release returned the woken waiter may take: the announcement's way to
/// the waiter's subscriber and one acquire round (a few ms without faults), with a wide margin.
pub const HANDOFF_BOUND: Duration = Duration::from_millis(200);
/// The holder's TTL: the waiter's refused round learns the holder's keys expire then, which it
/// may wait for instead of polling; far beyond the hold and the bound.
const HOLD_TTL: Duration = Duration::from_millis(1_900);
/// How long before the waiter's call a fault on a whole master disqualifies a hand-off: a
/// master restarted within the quarantine still counts for nothing (leaving a cluster of 3 with
/// exactly a quorum, where a waiter's round after its wake can still be refused), and a pub/sub
/// connection to it may be in its reconnection backoff. The quarantine is the maximum TTL and
/// its drift counted from the restart as the master's uptime allows, which is whole seconds:
/// up to a second more than the truth (see the library's `restart_protection`); then 500 ms
/// for the drift and the pub/sub reconnection.
const QUIET_BEFORE: Duration = MAX_TTL.saturating_add(Duration::from_millis(1_500));
/// How long after the heal the probe goes on: hand-offs without faults around.
const AFTER_HEAL: Duration = Duration::from_secs(4);

/// The probe's software: a hand-off every few hundred ms until `AFTER_HEAL` after the stop.
pub async fn run(client: Rc<Client>, mut rng: SeedRng) -> turmoil::Result {
    let holding = client.manager()?;
    let waiting = client.manager_polling(POLL_BELOW)?;
    // After the provisioning (client 0's first step), and with connections open.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while now() < client.stop_at + AFTER_HEAL {
        let Ok(holder) = holding.try_lock(RESOURCE, HOLD_TTL).await else {
            tokio::time::sleep(Duration::from_millis(50 + rng.below(100))).await;
            continue;
        };
        let asked = now();
        let held = grant(&client, asked, HOLD_TTL, holder.remaining(), holder.fence());
        let waiter = {
            let waiting = waiting.clone();
            let client = Rc::clone(&client);
            tokio::task::spawn_local(async move {
                let asked = now();
                let deadline = tokio::time::Instant::now().into_std() + Duration::from_secs(4);
                let got = waiting.lock_until(RESOURCE, HOLD_TTL, deadline).await;
                let got = got.map(|guard| {
                    let holds = grant(&client, asked, HOLD_TTL, guard.remaining(), guard.fence());
                    (guard, holds)
                });
                (asked, now(), got)
            })
        };
        // Long enough for the waiter's first round to be refused and its subscription made.
        tokio::time::sleep(Duration::from_millis(100 + rng.below(200))).await;
        client.end(&held);
        let released = holder.release().await.is_ok().then(now);
        let Ok((called, returned, got)) = waiter.await else {
            continue;
        };
        let granted = got.as_ref().ok().map(|_| returned);
        if let Some(released) = released {
            judge(&client, called, released, granted);
        }
        if let Ok((guard, holds)) = got {
            tokio::time::sleep(Duration::from_millis(rng.below(20))).await;
            client.end(&holds);
            let _ = guard.release().await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(100))).await;
    }
    // Background deletes land before the run ends (as every client lets them).
    tokio::time::sleep(super::lifetime::GRACE).await;
    Ok(())
}

/// A grant of the probe's lock, recorded as a hold.
fn grant(
    client: &Client,
    asked: Duration,
    ttl: Duration,
    remaining: Duration,
    fence: Option<u64>,
) -> Vec<usize> {
    let grant = Granted::of_rounds(asked, ttl, remaining);
    client.granted(Kind::Lock, &[RESOURCE.into()], grant, fence)
}

/// The waiter called at `called` and granted at `granted` (`None`: never) after the holder's
/// release returned at `released`: a violation if it was not woken and no fault excuses it.
fn judge(client: &Client, called: Duration, released: Duration, granted: Option<Duration>) {
    let end = granted.unwrap_or_else(now);
    let mut history = client.history.borrow_mut();
    let quiet_from = called.saturating_sub(QUIET_BEFORE);
    let faulted = history
        .faults
        .iter()
        .any(|f| f.client.is_none() && f.from <= end && f.to >= quiet_from);
    if faulted {
        return;
    }
    let late = match granted {
        Some(granted) => granted > released + HANDOFF_BOUND,
        None => true,
    };
    if late {
        let after = granted.map(|g| (g - released).as_millis());
        history.violation(
            end,
            "handoff-missed",
            format_args!(
                "waiter called at {} µs, released at {} µs, granted {after:?} ms after",
                called.as_micros(),
                released.as_micros(),
            ),
        );
    }
}
