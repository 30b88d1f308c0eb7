//! Slot claims of several slots at once ([`Slots::claim_many`](quorumlock::Slots::claim_many)),
//! as a scheduler that fell behind claims the slots due meanwhile: a batch worker per client
//! claims two to four slots of one job (due and late ones, so that batches of different
//! clients overlap), runs every slot it won for a while (kept by its lease), completes or
//! abandons each; a tenth of the batches are dropped at an await point (the runs not yet handed
//! over must be undone). Each run goes to the history for the at-most-once checker, as a single
//! claim's does.

use std::rc::Rc;
use std::time::Duration;

use quorumlock::{Redlock, SlotClaim, SlotOptions};

use super::history::SlotRun;
use super::host::{now, sim_time_of};
use super::slots::{RETENTION, TTL};
use super::workload::{cancellable, Client};
use crate::seed::SeedRng;

/// The job whose slots are claimed in batches (a job of its own: its slots are not the single
/// claims' ones).
const JOB: &str = "b";
/// A slot falls due every period.
const PERIOD: Duration = Duration::from_millis(300);
/// How many periods back a batch reaches.
const LATE_SLOTS: u64 = 6;

/// The batch worker of `client`, until the stop time.
pub async fn worker(client: Rc<Client>, locks: Redlock, mut rng: SeedRng) {
    let mut n = 0u64;
    while now() < client.stop_at {
        let due = (now().as_millis() / PERIOD.as_millis()) as u64;
        let size = 2 + rng.below(3);
        let mut slots: Vec<u64> = Vec::new();
        while (slots.len() as u64) < size {
            let slot = due.saturating_sub(rng.below(LATE_SLOTS));
            if !slots.contains(&slot) {
                slots.push(slot);
            }
            if due < LATE_SLOTS && slots.len() as u64 > due {
                break;
            }
        }
        let pairs: Vec<(&str, String)> = slots.iter().map(|s| (JOB, s.to_string())).collect();
        n += 1;
        let opts = SlotOptions::new()
            .ttl(TTL)
            .retention(RETENTION)
            .runner(format!("c{}b#{n}", client.index));
        let cancel_after = rng
            .one_in(10)
            .then(|| Duration::from_micros(rng.below(10_000)));
        let op = client.begin();
        let asked = now();
        let claim = client.tagged(op, locks.slots().claim_many(&pairs, &opts));
        let outcomes = cancellable(cancel_after, claim).await;
        let runs = outcomes
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|outcome| match outcome {
                Ok(SlotClaim::Claimed(run)) => Some(run),
                _ => None,
            });
        let mut running = Vec::new();
        for run in runs {
            handed_valid(&client, &run, asked);
            let lasts = match rng.below(10) {
                0 => 800 + rng.below(800),
                1..4 => 50 + rng.below(250),
                _ => rng.below(50),
            };
            let abandon = rng.one_in(4);
            let client = Rc::clone(&client);
            running.push(tokio::task::spawn_local(async move {
                let granted = now();
                let lease = run.lease();
                tokio::select! {
                    biased;
                    () = tokio::time::sleep(Duration::from_millis(lasts)) => {}
                    _ = lease.lost() => {}
                }
                client.history.borrow_mut().slot_run(SlotRun {
                    client: client.index,
                    slot: format!("{JOB}/{}", run.slot()),
                    checker: "batch-at-most-once",
                    granted,
                    ended: now(),
                    valid_until: Some(sim_time_of(lease.valid_until())),
                    token: None,
                });
                let _ = match abandon {
                    true => run.abandon().await,
                    false => run.complete().await,
                };
            }));
        }
        for run in running {
            let _ = run.await;
        }
        client.done(op);
        tokio::time::sleep(Duration::from_millis(20 + rng.below(80))).await;
    }
}

/// `expired-on-arrival`: a batch hands out no run whose validity is already over, as a single
/// claim never does, unless its client was paused since it asked (a call frozen across the
/// validity returns a claim already lost: outside the model).
fn handed_valid(client: &Client, run: &quorumlock::SlotRun, asked: std::time::Duration) {
    let valid_until = sim_time_of(run.lease().valid_until());
    let at = now();
    let mut history = client.history.borrow_mut();
    let paused = history
        .pauses
        .iter()
        .any(|p| p.client == client.index && p.to > asked);
    if valid_until <= at && !paused {
        history.violation(
            at,
            "expired-on-arrival",
            format_args!(
                "c{} handed the run of slot {JOB}/{} valid until {}",
                client.index,
                run.slot(),
                valid_until.as_micros()
            ),
        );
    }
}
