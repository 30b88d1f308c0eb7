//! One worker process of the cron workload (`jepsen-lite cron-worker --config JSON`): a
//! [`Scheduler`] running the jobs against the masters with fencing and restart protection on,
//! each execution reporting its `begin` and its one side effect (`write`) to the fenced store.
//!
//! The controller starts it with the clock shim preloaded, so its wall clock (which decides
//! when slots fall due) is skewed; its monotonic clock, and so every lock timing, is the
//! host's. It reports its wall clock to the store every second, which proves the skew.
//!
//! With `--mutant release-at-end` it runs no scheduler: each job fires on its own wall clock,
//! takes a plain lock on the slot and releases it when the job ends, as `quorumlock exec
//! --no-wait` from cron did. A worker whose clock lags then finds the lock free and runs the
//! slot again, which the checker must report. With `--mutant skip-abandoned` the scheduler does
//! not retry a slot whose runner died: the checker must report it missed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use quorumlock::Redlock;
use quorumlock_scheduler::{Job, OnAbandoned, Schedule, Scheduler, Slot};
use serde::{Deserialize, Serialize};

use super::request::{Client, Kind, Request};
use crate::clock::now_ns;
use crate::process_env;

/// The worker's deliberately broken variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    /// A plain lock per slot, released when the job ends, instead of a slot claim that records
    /// completion.
    ReleaseAtEnd,
    /// The scheduler with [`OnAbandoned::Skip`] instead of `Retry`: a slot whose runner was
    /// killed or lost its claim is never run (at most once, not at least once).
    SkipAbandoned,
    /// The library's `SlotRecordNotRenewed` mutant: a long run's renewals keep its claim but
    /// not the slot's record, which expires under the run; once the run is cut, its slot
    /// reads free and a lagging worker runs it a second time (only in a build with
    /// `--cfg quorumlock_mutants`).
    RecordNotRenewed,
}

/// A job whose runs last longer than its slots' retention and are cut by a cap, at most once:
/// each run's end (abandoned at the cap) must still be on record when the workers whose clocks
/// lag claim the slot, or they run it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongRun {
    /// How long a run would work if not cut, ms (longer than `max_runtime_ms`).
    pub work_ms: u64,
    /// The run's cap (its lease's max hold), ms.
    pub max_runtime_ms: u64,
    /// The slots' record retention, ms (shorter than a run).
    pub retention_ms: u64,
    /// The claims' TTL, ms.
    pub claim_ttl_ms: u64,
    /// The starting deadline, ms.
    pub deadline_ms: u64,
}

/// One job: a name and a period (slots on the multiples of the period since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The job's name.
    pub name: String,
    /// Its period, ms.
    pub period_ms: u64,
    /// Long runs, at most once, instead of the workload's short runs retried when abandoned.
    #[serde(default)]
    pub long: Option<LongRun>,
}

/// What the controller hands a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// The worker's index.
    pub id: usize,
    /// The masters' URLs.
    pub nodes: Vec<String>,
    /// The fenced store.
    pub store: SocketAddr,
    /// The jobs.
    pub jobs: Vec<JobSpec>,
    /// How long each execution works between its `begin` and its `write`, ms.
    pub work_ms: u64,
    /// The slot claims' TTL, ms.
    pub claim_ttl_ms: u64,
    /// The starting deadline, ms.
    pub deadline_ms: u64,
    /// The managers' max TTL (restart protection's quarantine), ms.
    pub max_ttl_ms: u64,
    /// The per-master timeout, ms.
    pub node_timeout_ms: u64,
}

/// What one execution reports: who, which slot, which claim.
#[derive(Debug, Clone)]
struct Exec {
    store: SocketAddr,
    worker: usize,
    job: String,
    slot_ms: i64,
    token: Option<u64>,
    attempt: u32,
    work: Duration,
}

fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Exec {
    fn request(&self, kind: Kind) -> Request {
        let wall_us = wall_us();
        Request {
            kind,
            worker: self.worker,
            pid: std::process::id(),
            job: self.job.clone(),
            slot_ms: self.slot_ms,
            token: self.token,
            attempt: self.attempt,
            wall_us,
            mono_ns: now_ns(),
            own_lateness_ms: (kind == Kind::Begin)
                .then(|| (wall_us - self.slot_ms * 1000) as f64 / 1000.0),
        }
    }

    /// Begins, works, writes. The lease is deliberately not checked before the write: the
    /// fenced store is what must refuse a runner that lost its claim.
    async fn run(self) -> Result<(), String> {
        let mut store = Client::connect(self.store)
            .await
            .map_err(|e| format!("store: {e}"))?;
        let begin = store
            .call(&self.request(Kind::Begin))
            .await
            .map_err(|e| format!("store: {e}"))?;
        if !begin.accepted {
            return Err(format!("begin refused: {:?}", begin.reason));
        }
        tokio::time::sleep(self.work).await;
        let write = store
            .call(&self.request(Kind::Write))
            .await
            .map_err(|e| format!("store: {e}"))?;
        if write.accepted {
            Ok(())
        } else {
            Err(format!("write refused: {:?}", write.reason))
        }
    }
}

/// Runs the worker until it is killed.
///
/// # Errors
///
/// A bad configuration (masters, jobs).
pub async fn run(
    cfg: WorkerConfig,
    mutant: Option<Mutant>,
) -> Result<(), Box<dyn std::error::Error>> {
    let locks = match mutant {
        Some(Mutant::RecordNotRenewed) => record_not_renewed(&cfg).await?,
        _ => {
            process_env::worker_manager(
                cfg.nodes.clone(),
                Duration::from_millis(cfg.node_timeout_ms),
                Duration::from_millis(cfg.max_ttl_ms),
            )
            .await?
        }
    };
    tokio::spawn(report_clock(cfg.store, cfg.id));
    let work = Duration::from_millis(cfg.work_ms);
    match mutant {
        None | Some(Mutant::SkipAbandoned) | Some(Mutant::RecordNotRenewed) => {
            let on_abandoned = if mutant == Some(Mutant::SkipAbandoned) {
                OnAbandoned::Skip
            } else {
                OnAbandoned::Retry
            };
            let mut builder = Scheduler::builder(&locks).worker(format!("w{}", cfg.id));
            for spec in &cfg.jobs {
                let (store, worker, name) = (cfg.store, cfg.id, spec.name.clone());
                let work = spec
                    .long
                    .as_ref()
                    .map_or(work, |long| Duration::from_millis(long.work_ms));
                let job = Job::every(
                    spec.name.clone(),
                    Duration::from_millis(spec.period_ms),
                    move |ctx| {
                        Exec {
                            store,
                            worker,
                            job: name.clone(),
                            slot_ms: ctx.slot().due().timestamp_millis(),
                            token: ctx.fence(),
                            attempt: ctx.attempt(),
                            work,
                        }
                        .run()
                    },
                )?
                .starting_deadline(Duration::from_millis(cfg.deadline_ms))
                .claim_ttl(Duration::from_millis(cfg.claim_ttl_ms))
                .on_abandoned(on_abandoned);
                let job = match &spec.long {
                    None => job,
                    Some(long) => job
                        .starting_deadline(Duration::from_millis(long.deadline_ms))
                        .claim_ttl(Duration::from_millis(long.claim_ttl_ms))
                        .retention(Duration::from_millis(long.retention_ms))
                        .max_runtime(Duration::from_millis(long.max_runtime_ms))
                        .on_abandoned(OnAbandoned::Skip),
                };
                builder = builder.job(job);
            }
            let _scheduler = builder.start()?;
            std::future::pending::<()>().await;
        }
        Some(Mutant::ReleaseAtEnd) => {
            let locks = Arc::new(locks.fenced());
            for spec in cfg.jobs.clone() {
                let schedule = Schedule::every(Duration::from_millis(spec.period_ms))?;
                tokio::spawn(release_at_end(
                    Arc::clone(&locks),
                    schedule,
                    spec.name,
                    cfg.clone(),
                ));
            }
            std::future::pending::<()>().await;
        }
    }
    Ok(())
}

/// The worker's manager under the library's `SlotRecordNotRenewed` mutant.
#[cfg(quorumlock_mutants)]
async fn record_not_renewed(cfg: &WorkerConfig) -> Result<Redlock, Box<dyn std::error::Error>> {
    let locks =
        process_env::fenced_manager(cfg.nodes.clone(), Duration::from_millis(cfg.max_ttl_ms))
            .node_timeout(Duration::from_millis(cfg.node_timeout_ms))
            .mutant(quorumlock::Mutant::SlotRecordNotRenewed)
            .build()?
            .fenced();
    let _ = locks.connect().await;
    Ok(locks)
}

/// Without the mutants flag the library mutant does not exist.
#[cfg(not(quorumlock_mutants))]
async fn record_not_renewed(_: &WorkerConfig) -> Result<Redlock, Box<dyn std::error::Error>> {
    Err(
        "mutant record-not-renewed needs jepsen-lite built with RUSTFLAGS=\"--cfg \
         quorumlock_mutants\" (scripts/jepsen.sh builds it so)"
            .into(),
    )
}

/// The mutant's loop for one job: at each due time by this worker's clock, a plain lock on the
/// slot, the job, the release.
async fn release_at_end(locks: Arc<Redlock>, schedule: Schedule, job: String, cfg: WorkerConfig) {
    let ttl = Duration::from_millis(cfg.claim_ttl_ms);
    let mut cursor: DateTime<Utc> = Utc::now();
    while let Some(next) = schedule.next_after(cursor) {
        loop {
            let left = (next - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        }
        cursor = next;
        let slot = Slot::new(next);
        let locks = Arc::clone(&locks);
        let (job, store, worker) = (job.clone(), cfg.store, cfg.id);
        let work = Duration::from_millis(cfg.work_ms);
        tokio::spawn(async move {
            let resource = format!("cron-mutant:{job}:{}", slot.id());
            if let Ok(guard) = locks.try_lock(&resource, ttl).await {
                let _ = Exec {
                    store,
                    worker,
                    job,
                    slot_ms: slot.due().timestamp_millis(),
                    token: guard.fence(),
                    attempt: 1,
                    work,
                }
                .run()
                .await;
                let _ = guard.release().await;
            }
        });
    }
}

/// Reports this worker's wall clock with its monotonic clock every second.
async fn report_clock(store: SocketAddr, worker: usize) {
    let mut client = None;
    loop {
        if client.is_none() {
            client = Client::connect(store).await.ok();
        }
        if let Some(c) = client.as_mut() {
            let req = Request {
                kind: Kind::Clock,
                worker,
                pid: std::process::id(),
                job: String::new(),
                slot_ms: 0,
                token: None,
                attempt: 0,
                wall_us: wall_us(),
                mono_ns: now_ns(),
                own_lateness_ms: None,
            };
            if c.call(&req).await.is_err() {
                client = None;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
