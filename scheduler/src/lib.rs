//! # quorumlock-scheduler: cron across a fleet, each slot at most once
//!
//! Several workers (processes, hosts) run the same jobs; every **slot** of every job — one due
//! instant of its schedule — runs on at most one of them. Each slot is claimed on a quorum of
//! the Redis masters of a [`quorumlock::Redlock`] manager
//! ([`Slots::claim`](quorumlock::Slots::claim)): the first worker to claim it runs
//! it under a lease with a fencing token; the others see it running or completed and move on,
//! and a worker that fires late (a skewed clock, a busy host) still finds the completion record.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock_scheduler::{Job, OnAbandoned, Scheduler};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = quorumlock::Redlock::builder()
//!     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
//!     .build()?;
//! let scheduler = Scheduler::builder(&locks)
//!     .job(Job::every("heartbeat", Duration::from_secs(10), |ctx| async move {
//!         println!("slot {} on {} with token {:?}", ctx.slot(), ctx.worker(), ctx.fence());
//!         Ok::<_, std::io::Error>(())
//!     })?)
//!     .job(
//!         Job::cron("nightly", "0 0 3 * * *", chrono_tz::Europe::Berlin, |ctx| async move {
//!             if !ctx.is_held() {
//!                 return Err("lost the claim before writing".into());
//!             }
//!             // write the report, passing ctx.fence() to the store ...
//!             Ok::<_, quorumlock_scheduler::JobError>(())
//!         })?
//!         .on_abandoned(OnAbandoned::Retry)
//!         .max_runtime(Duration::from_secs(3600)),
//!     )
//!     .start()?;
//! # let stop = std::future::pending::<()>();
//! stop.await; // e.g. tokio::signal::ctrl_c()
//! let report = scheduler.shutdown(Duration::from_secs(30)).await;
//! println!("{} runs were cancelled", report.cancelled);
//! for job in scheduler.status() {
//!     for entry in job.recent {
//!         println!("{} {}: {:?} by {:?}", job.name, entry.slot, entry.outcome, entry.runner);
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## What "once" means
//!
//! * **At most once per slot** (the default, [`OnAbandoned::Skip`]), under Redlock's
//!   assumptions (see the `quorumlock` crate docs): a claim is granted by a quorum, the
//!   completion is recorded on a quorum and kept for the job's
//!   [retention](Job::retention), so any later claim of the slot, by any worker, is refused.
//!   A runner that dies mid-slot leaves the slot abandoned, not rerun.
//! * **At least once, by policy** ([`OnAbandoned::Retry`]): a slot whose runner died (its claim
//!   expired after one [claim TTL](Job::claim_ttl) without completion) or was cancelled is
//!   claimed again by another worker, with a **higher fencing token**, up to
//!   [`max_attempts`](Job::max_attempts). The dead runner may have done part of the work, and a
//!   paused runner may even resume after the retry started: the job's side effects must carry
//!   [`JobContext::fence`] and the store must reject tokens lower than the highest it saw.
//!   [`JobContext::is_held`] before each side effect narrows the window; only the token closes it.
//! * A job function that **returns an error** (or panics) has run: its slot is recorded as
//!   completed and is not retried.
//! * A master that restarts without its data forgets claims and completions: with the
//!   library's restart protection it sits out one max TTL, which covers running claims but not
//!   completion records older than that, so a worker that fires later than that after a
//!   restart can run a completed slot again. Run masters with `appendfsync always` when that
//!   matters, or keep the starting deadline short.
//!
//! ## Clocks
//!
//! A slot's identity ([`Slot::id`]) is its due instant from the schedule (RFC 3339, UTC), never
//! the time at which a worker picks it up: workers whose clocks disagree name the same slot the
//! same way. A worker whose wall clock is off by `s` fires `s` early or late by the true time
//! (and records that lateness by its own clock); the slot is the same, and the first claim wins.
//! Keep skew well under the [starting deadline](Job::starting_deadline) (or a lagging worker
//! counts misses) and under the retention (or a very late worker finds no record and runs the
//! slot again). Which worker runs a slot also follows the clocks: the one furthest ahead falls
//! due first. A [fleet](SchedulerBuilder::fleet) keeps each slot to its first-ranked worker
//! while the clocks differ by at most its [skew bound](SchedulerBuilder::max_clock_skew)
//! (100 ms unless set). The claims' TTLs run on the masters' clocks and the client's monotonic
//! clock, as for any quorumlock lock: the drift allowance must cover the rate differences.
//!
//! ## Policies
//!
//! * Missed slots ([`CatchUp`]): a slot may start until its starting deadline (like Kubernetes'
//!   `startingDeadlineSeconds`); a worker starting up or waking from a stall runs none, the
//!   newest, or all of the slots within it.
//! * Concurrency ([`Concurrency`]): `Allow`, `Forbid` (a fleet-wide job lock held for the run),
//!   `Replace` (the next slot cancels the run of the previous one).
//! * A [fleet](SchedulerBuilder::fleet): workers that know each other claim each slot in rank
//!   order (by a hash of the worker, the job and the slot): the first-ranked as it falls due,
//!   the others after the [clock skew bound](SchedulerBuilder::max_clock_skew) and
//!   [`backup_after`](SchedulerBuilder::backup_after) apart, when they usually find it
//!   completed (a dead first worker's slots run later: see [`SchedulerBuilder::fleet`] for
//!   how much). Without one, a [stagger](Job::stagger) (a few milliseconds per worker and
//!   slot, fixed by a hash) makes one worker usually claim first and the others be refused
//!   cheaply; [jitter](Job::jitter) before claims (with a fleet, the same on every worker for
//!   a slot); a [runtime cap](Job::max_runtime) (the lease's `max_hold`);
//!   [graceful shutdown](Scheduler::shutdown).
//! * A claim that failed on contention (a split vote that no worker won: nobody holds the
//!   slot) is claimed again after a short random delay while the slot is within its starting
//!   deadline. Other claim errors are recorded, not retried.
//! * Claims and completions made at the same instant (jobs due on the same second) go to each
//!   master in batches ([`Slots::claim_many`](quorumlock::Slots::claim_many),
//!   [`SlotRun::complete_all`](quorumlock::SlotRun::complete_all)), one batch in flight at a
//!   time: each slot is decided exactly as a single claim would be.
//!
//! ## Observing
//!
//! [`Scheduler::stats`] (runs, skips, misses, retries, lateness percentiles per job),
//! [`Scheduler::status`] (each job's recent slots, who ran them and with which token),
//! [`Scheduler::slot_state`] (what a quorum says about any slot). Every run is in a tracing span
//! `slot` with the job, slot, fence and attempt. With the `metrics` feature the counters also go
//! to the `metrics` facade (see [`JobStats`]).
//!
//! ## Layout
//!
//! `schedule` (cron and intervals), `slot` (identity), `plan` (deadline and catch-up, pure),
//! `policy`, `job`, `context`, `stagger` (each worker's delay or rank per slot), `claims` (the seam
//! to the masters: over quorumlock with the batcher of one instant's claims, and a fake
//! for the unit tests), `runner` (the loop, runs and watches of one job), `shared`, `clock`,
//! `stats`, `status`, `scheduler` (the handle).

mod claims;
mod clock;
mod context;
mod error;
mod job;
mod percentile;
mod plan;
mod policy;
mod readable;
mod runner;
mod schedule;
mod scheduler;
mod shared;
mod slot;
mod stagger;
mod stats;
mod status;
#[cfg(test)]
mod tests;

pub use claims::{RunRecord, SlotState};
pub use context::JobContext;
pub use error::SchedulerError;
pub use job::{
    Job, JobError, DEFAULT_CLAIM_TTL, DEFAULT_HISTORY, DEFAULT_MAX_ATTEMPTS, DEFAULT_STAGGER,
    DEFAULT_STARTING_DEADLINE,
};
pub use percentile::nearest_rank;
pub use policy::{CatchUp, Concurrency, OnAbandoned};
pub use schedule::Schedule;
pub use scheduler::{
    Scheduler, SchedulerBuilder, ShutdownReport, BACKUP_MARGIN, DEFAULT_BACKUP_AFTER,
    DEFAULT_MAX_CLOCK_SKEW,
};
pub use slot::Slot;
pub use stats::{JobStats, Lateness};
pub use status::{JobStatus, SlotEntry, SlotOutcome};

/// Time zones for [`Schedule::cron`] (re-exported from `chrono-tz`).
pub use chrono_tz::Tz;
