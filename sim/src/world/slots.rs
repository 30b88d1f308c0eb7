//! Slot claims, as a fleet's schedulers make them: workers claim slots of one periodic job (the
//! slot due now, or one a few periods late: a host that fires late), at most once (the
//! default policy), run them (a few for longer than the record's retention, kept by the run's
//! lease), complete or abandon them; some claims are dropped at an await point. Each run goes
//! to the history for the at-most-once checker; a claim answered "abandoned" because of a
//! dropped claim whose record still stands on a quorum is a slot lost (checked here, against
//! the masters' data).

use std::rc::Rc;
use std::time::Duration;

use quorumlock::{Redlock, SlotClaim, SlotOptions};

use super::history::SlotRun;
use super::host::{now, sim_time_of, Served};
use super::workload::{cancellable, Client};
use crate::seed::SeedRng;

/// The job every slot belongs to.
const JOB: &str = "j";
/// A slot falls due every period.
const PERIOD: Duration = Duration::from_millis(400);
/// How many periods late a host may fire.
const LATE_SLOTS: u64 = 8;
/// The claim's TTL, renewed by its run's lease.
pub const TTL: Duration = Duration::from_millis(300);
/// How long a run's end is remembered: shorter than the late window, so that a record that
/// expired under a long run lets a late host claim the slot again.
pub const RETENTION: Duration = Duration::from_millis(600);
/// The longest a slot's record may be kept: a claim keeps it the claim's TTL plus the
/// retention, a renewal at least the retention.
pub const RECORD_BOUND: Duration = TTL.saturating_add(RETENTION);

/// What one claim of one slot worker led to.
enum Claimed {
    Ran,
    Dropped(String),
    Other,
}

/// One slot worker of `client`, named `name`, until the stop time.
pub async fn worker(client: Rc<Client>, locks: Redlock, mut rng: SeedRng, name: String) {
    let mut n = 0u64;
    while now() < client.stop_at {
        let due = (now().as_millis() / PERIOD.as_millis()) as u64;
        let slot = due.saturating_sub(rng.below(LATE_SLOTS)).to_string();
        n += 1;
        let runner = format!("{name}#{n}");
        let opts = SlotOptions::new()
            .ttl(TTL)
            .retention(RETENTION)
            .runner(runner.clone());
        // Half are dropped within a few round trips: mid-round, or while a won claim's
        // fencing token is written back.
        let cancel_after = rng
            .one_in(2)
            .then(|| Duration::from_micros(rng.below(8_000)));
        let op = client.begin();
        let claim = client.tagged(op, locks.slots().claim(JOB, &slot, &opts));
        let outcome = match cancellable(cancel_after, claim).await {
            None => Claimed::Dropped(runner),
            Some(Ok(SlotClaim::Claimed(run))) => {
                let granted = now();
                let lasts = match rng.below(10) {
                    // Longer than the claim's TTL plus the retention: only the lease's
                    // renewals keep the record.
                    0 => 1000 + rng.below(1000),
                    1 | 2 => 50 + rng.below(250),
                    _ => rng.below(50),
                };
                let lease = run.lease();
                // Biased: tokio picks among ready branches at random otherwise, from a seed of
                // its own, and a seed must replay.
                tokio::select! {
                    biased;
                    () = tokio::time::sleep(Duration::from_millis(lasts)) => {}
                    _ = lease.lost() => {}
                }
                client.history.borrow_mut().slot_run(SlotRun {
                    client: client.index,
                    slot: slot.clone(),
                    checker: "slot-at-most-once",
                    granted,
                    ended: now(),
                    valid_until: Some(sim_time_of(lease.valid_until())),
                    token: None,
                });
                let _ = match rng.one_in(4) {
                    true => run.abandon().await,
                    false => run.complete().await,
                };
                Claimed::Ran
            }
            Some(Ok(SlotClaim::Abandoned(record))) => {
                if let Some(runner) = record.runner {
                    client.abandoned_by(&slot, &runner);
                }
                Claimed::Other
            }
            Some(_) => Claimed::Other,
        };
        client.done(op);
        if let Claimed::Dropped(runner) = outcome {
            let dropped = (client.index, now());
            client
                .history
                .borrow_mut()
                .dropped_claims
                .insert(runner, dropped);
        }
        tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
    }
}

impl Client {
    /// A claim of `slot` was answered "abandoned" with `runner`'s record: if that runner's
    /// claim was dropped before it was handed over, it must have been undone, so its record
    /// can stand only where an undo failed (a minority, after a crash). On a quorum, the slot
    /// is lost: nobody ran it, and at most once it never will be. Unless the dropping client
    /// was paused since the drop: its undo froze with it, as a crashed client's would be lost.
    fn abandoned_by(&self, slot: &str, runner: &str) {
        let mut history = self.history.borrow_mut();
        let Some(&(dropper, dropped)) = history.dropped_claims.get(runner) else {
            return;
        };
        let at = now();
        if history
            .pauses
            .iter()
            .any(|p| p.client == dropper && p.from < at && p.to > dropped)
        {
            *history.effects.entry("pause-froze-undo").or_default() += 1;
            return;
        }
        let standing = self
            .served
            .iter()
            .filter(|served| record_of(served, slot).is_some_and(|r| r == runner.as_bytes()))
            .count();
        if standing > self.served.len() / 2 {
            history.violation(
                now(),
                "slot-lost",
                format_args!("slot {slot}: dropped claim {runner} stands on {standing} masters"),
            );
        }
    }
}

/// The runner of `slot`'s record on `served`, if it has a live one: read from the master's
/// data (the key is the library's: `slot-record:<job length>:<job>:<slot>` under the prefix).
fn record_of(served: &Served, slot: &str) -> Option<Vec<u8>> {
    let key = format!("quorumlock:\u{1f}slot-record:{}:{JOB}:{slot}", JOB.len());
    let now_ms = served.clock_at(now()).millis();
    let mut master = served.master.borrow_mut();
    let hash = master.keyspace().hash(key.as_bytes(), now_ms).ok()??;
    hash.get(b"runner".as_slice()).cloned()
}
