//! One cell: fresh servers, three workers contending through their own clients, the fault,
//! then jepsen-lite's checkers over the history and its verdict against the expectation the
//! cell declared.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jepsen_lite::checker::{self, Params, Report};
use jepsen_lite::clock::{ms, now_ns};
use jepsen_lite::evidence::Evidence;
use jepsen_lite::history::{self, Kind};
use jepsen_lite::outcome::Verdict;
use jepsen_lite::resource;
use jepsen_lite::scenario::{Expect, Minimum};
use jepsen_lite::verdict::{fenced_observation, judge, ClaimsCheck};
use quorumlock_testkit::Mode;
use serde_json::json;

use super::cells::{Cell, Fault};
use super::clock::{self, Shim};
use super::nemesis::strike;
use super::rendezvous::Rendezvous;
use super::results::{CellRow, FaultProof, Figures};
use super::stray;
use super::testbed::Testbed;
use super::workload::{Made, Recorder, Stall, Worker};

/// Workers per cell, each with its own client.
const WORKERS: usize = 3;
/// How long a worker may take to notice the end of the cell (a blocking acquisition).
const STOP_WAIT: Duration = Duration::from_secs(20);
/// How long after the last heal a grant must come: the longest TTL or session, plus
/// reconnections and elections on two shared cores.
const LIVENESS_SLACK: Duration = Duration::from_secs(8);

/// How long the phases of a cell last.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The TTL, lease or session timeout of every subject.
    pub ttl: Duration,
    /// Work before the fault (the whole cell without one).
    pub warmup: Duration,
    /// How long a pause or partition lasts: past the TTL.
    pub stall: Duration,
    /// Work after the fault is lifted.
    pub after: Duration,
    /// Grants a cell needs to mean anything.
    pub min_grants: usize,
}

impl Timing {
    /// The smoke (one cycle is enough) or the full run.
    pub fn new(quick: bool) -> Self {
        let ttl = Duration::from_secs(2);
        if quick {
            Self {
                ttl,
                warmup: Duration::from_millis(800),
                stall: ttl * 2,
                after: Duration::from_secs(2),
                min_grants: 1,
            }
        } else {
            Self {
                ttl,
                warmup: Duration::from_secs(3),
                stall: ttl * 2,
                after: Duration::from_secs(5),
                min_grants: 10,
            }
        }
    }
}

/// Runs `cell`; its history goes to `dir`.
pub async fn run(cell: Cell, timing: Timing, dir: &Path) -> CellRow {
    let started = Instant::now();
    let mut row = CellRow {
        subject: cell.subject.label().to_owned(),
        fault: cell.fault.label().to_owned(),
        expected: cell.expect.to_string(),
        because: cell.because.to_owned(),
        ..CellRow::default()
    };
    if let Err(e) = play(cell, timing, dir, &mut row).await {
        row.observed = "could not run".to_owned();
        row.verdict = verdict_text(Verdict::Skipped).to_owned();
        row.why = e;
    }
    row.seconds = started.elapsed().as_secs_f64();
    row
}

async fn play(cell: Cell, timing: Timing, dir: &Path, row: &mut CellRow) -> Result<(), String> {
    let peer_links = cell.fault == Fault::MemberPartition;
    // The orphans' scene has a holder and a waiter of its own. A clock bump falls on a
    // holder with one waiter: two waiters' split votes could outlast the holder's section.
    let workers = if cell.fault.is_a_clock_bump() {
        2
    } else {
        WORKERS
    };
    let rows = workers + if cell.fault == Fault::Orphans { 2 } else { 0 };
    // A clock bump's servers start under the clock shim, which must outlive them.
    let shim = if cell.fault.is_a_clock_bump() {
        Some(Shim::install()?)
    } else {
        None
    };
    let mut testbed = match &shim {
        Some(shim) => {
            let servers = tokio::task::block_in_place(|| shim.start_servers(cell.subject))?;
            Testbed::around(cell.subject, rows, timing.ttl, servers, None).await?
        }
        None => Testbed::start_with(cell.subject, rows, timing.ttl, peer_links).await?,
    };
    // The holder a clock bump falls on holds for half a TTL: well inside its validity, so
    // that only the step can end its grant early, and long enough for the step, its proof
    // and a waiter's grant. In Kleppmann's case it is worker 0, whose links the cell cuts.
    let rendezvous = cell.fault.is_a_clock_bump().then(|| {
        let only = (cell.fault == Fault::ClockBumpMinority).then_some(0);
        Arc::new(Rendezvous::new(only, timing.ttl / 2))
    });
    let store = resource::Server::start()
        .await
        .map_err(|e| format!("starting the fenced store: {e}"))?;
    let recorder = Arc::new(Recorder::default());
    // Kleppmann's case: worker 0 never reaches the masters beyond a bare majority, from its
    // first request on (a link cut later could strand a key of an earlier grant there, whose
    // release the cut swallows, refusing the waiter until it expired).
    if cell.fault == Fault::ClockBumpMinority {
        let n = testbed.servers.len();
        let cut: Vec<usize> = (n / 2 + 1..n).collect();
        for &node in &cut {
            testbed.links.set(0, node, Mode::Blackhole);
        }
        recorder.nemesis("cut-links", json!({"client": 0, "nodes": cut}));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stalled = Arc::new(AtomicBool::new(false));
    let ttl_ms = u64::try_from(timing.ttl.as_millis()).unwrap_or(u64::MAX);
    let mut tasks = Vec::new();
    for id in 0..workers {
        let subject = testbed
            .client(id)
            .await
            .map_err(|e| format!("client {id}: {e}"))?;
        let stall = (id == 0 && cell.fault.is_the_holders()).then_some(Stall {
            fault: cell.fault,
            after: timing.warmup,
            length: timing.stall,
        });
        let worker = Worker {
            id: u32::try_from(id).unwrap_or(u32::MAX),
            subject,
            links: testbed.links.clone(),
            store: store.addr,
            recorder: Arc::clone(&recorder),
            stop: Arc::clone(&stop),
            stall,
            ttl_ms: cell.subject.client_bounds_validity().then_some(ttl_ms),
            stalled: Arc::clone(&stalled),
            heartbeats: cell.subject.keeps_alive(),
            rendezvous: rendezvous.clone(),
        };
        tasks.push(tokio::spawn(worker.run()));
    }

    let mut evidence = Evidence::default();
    let mut orphans = None;
    match cell.fault {
        Fault::None => tokio::time::sleep(timing.warmup).await,
        Fault::ClientPause | Fault::Partition => {
            // Worker 0 makes it at its first grant after the warmup.
            let deadline = Instant::now() + timing.warmup + timing.stall + STOP_WAIT;
            while !stalled.load(Ordering::Acquire) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(timing.after).await;
        }
        Fault::Orphans => {
            tokio::time::sleep(timing.warmup).await;
            let scene = super::orphans::scene(&testbed, workers, &recorder, timing.ttl).await;
            let (fault, reading) = scene.made;
            evidence.record(fault, reading);
            orphans = Some(scene.check);
            tokio::time::sleep(timing.after).await;
        }
        Fault::ClockBump | Fault::ClockBumpMinority => {
            tokio::time::sleep(timing.warmup).await;
            if let (Some(shim), Some(meeting)) = (&shim, &rendezvous) {
                let (fault, reading) =
                    clock_bump(cell.fault, shim, meeting, &testbed, &recorder, timing).await;
                evidence.record(fault, reading);
            }
            tokio::time::sleep(timing.after).await;
        }
        Fault::ServerPause
        | Fault::ServerCrash
        | Fault::DataLoss
        | Fault::MemberPartition
        | Fault::PacketLoss => {
            tokio::time::sleep(timing.warmup).await;
            let ((fault, reading), note) = strike(
                cell.fault,
                &mut testbed.servers,
                testbed.peers.as_ref(),
                &recorder,
                timing.stall,
            )
            .await;
            evidence.record(fault, reading);
            row.notes.extend(note);
            tokio::time::sleep(timing.after).await;
        }
    }
    // Liveness is judged up to its bound after the last heal: the cell goes on until a grant
    // came after it or the bound passed, so that a slow recovery is not taken for none.
    let bound_ns = u64::try_from((timing.ttl + LIVENESS_SLACK).as_nanos()).unwrap_or(u64::MAX);
    while let Some((heal, false)) = recorder.since_last_heal() {
        if now_ns() >= heal.saturating_add(bound_ns) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Release);
    for (id, mut task) in tasks.into_iter().enumerate() {
        match tokio::time::timeout(STOP_WAIT, &mut task).await {
            Ok(Ok(Ok(Some((fault, reading))))) => evidence.record(fault, reading),
            Ok(Ok(Ok(None))) => {}
            Ok(Ok(Err(e))) => row
                .notes
                .push(format!("worker {id}: the store failed: {e}")),
            Ok(Err(e)) => row.notes.push(format!("worker {id} panicked: {e}")),
            Err(_) => {
                task.abort();
                row.notes.push(format!(
                    "worker {id} was still waiting for the lock at the end"
                ));
            }
        }
    }
    if cell.fault.is_the_holders() && evidence.injected() == 0 {
        evidence.record(
            format!("{} by worker 0", cell.fault.label()),
            Err("worker 0 was never granted the lock after the warmup".to_owned()),
        );
    }
    // No grant after the heal: what holds the lock, read on the servers (quorumlock's keys
    // are jepsen-lite's to read).
    if matches!(recorder.since_last_heal(), Some((_, false)))
        && !cell.subject.client_bounds_validity()
    {
        row.notes
            .push(super::orphans::describe(&testbed, super::workload::RESOURCE).await);
    }
    tokio::task::block_in_place(move || drop(testbed));

    let events = recorder.events();
    let (accesses, unfenced, fenced) = store.snapshot();
    let cell_dir = dir.join(format!("{}-{}", row.subject, row.fault));
    if std::fs::create_dir_all(&cell_dir).is_ok() {
        let _ = history::write_jsonl(&cell_dir.join("history.jsonl"), &events);
        let _ = history::write_jsonl(&cell_dir.join("resource.jsonl"), &accesses);
    }
    let params = Params {
        epsilon_ns: ms(1),
        liveness_bound_ns: u64::try_from((timing.ttl + LIVENESS_SLACK).as_nanos())
            .unwrap_or(u64::MAX),
    };
    let report = checker::check(&events, &accesses, &unfenced, &fenced, &params);
    let (mut observed, mut observed_text) = observe(&report, cell.subject.fences());
    let stray = stray::unexplained(&report.claims.overlaps, &events);
    if let Some(first) = stray.first() {
        observed = Expect::Break;
        observed_text = format!(
            "break: {} overlaps between grants no fault touched ({} and {}, {:.1} ms)",
            stray.len(),
            first.first,
            first.second,
            first.overlap_ms
        );
    }
    // A clock bump is caught only if the stepped holder's stale write was: a rejection of
    // another grant's write (one that outlived its validity on a loaded box) is not its doing.
    if cell.fault.is_a_clock_bump()
        && observed == Expect::Caught
        && stray::faulted_rejections(&accesses, &events) == 0
    {
        observed = Expect::Hold;
        observed_text = format!(
            "{observed_text}, none of them the stepped holder's: the step made no stale write"
        );
    }
    let claims_observed = if report.claims.overlaps.is_empty() {
        Expect::Hold
    } else {
        Expect::Break
    };
    let minimum = Minimum {
        claims: timing.min_grants,
        faults: usize::from(cell.fault != Fault::None),
    };
    let mut judgement = judge(
        cell.expect,
        observed,
        report.claims.claims,
        &evidence,
        minimum,
        &Ok(String::new()),
        ClaimsCheck {
            expected: None,
            observed: claims_observed,
        },
    );
    if judgement.verdict == Verdict::Pass && !report.liveness.ok {
        judgement.verdict = Verdict::Fail;
        judgement.why = format!(
            "liveness: no grant within {:?} of the last heal",
            timing.ttl + LIVENESS_SLACK
        );
    }
    match &orphans {
        Some(Ok(lifetimes)) => {
            observed_text.push_str("; orphans gone in time");
            row.notes.push(lifetimes.clone());
        }
        Some(Err(outlived)) => {
            observed_text.push_str("; an orphan outlived its bound");
            if judgement.verdict == Verdict::Pass {
                judgement.verdict = Verdict::Fail;
                judgement.why = format!("orphans: {outlived}");
            }
            row.notes.push(outlived.clone());
        }
        None => {}
    }
    row.observed = observed_text;
    row.verdict = verdict_text(judgement.verdict).to_owned();
    row.why = judgement.why;
    row.figures = figures(&report, &events);
    row.faults = evidence
        .checks
        .iter()
        .map(|c| FaultProof {
            fault: c.fault.clone(),
            reading: c.reading.clone(),
            took_effect: c.took_effect,
        })
        .collect();
    Ok(())
}

/// A clock bump inside a holder's section: on a majority of the servers (all of them the
/// holder's), or (Kleppmann's case) on one master of a holder that stands on a bare majority
/// because worker 0's links to the other masters are cut for the whole cell.
async fn clock_bump(
    fault: Fault,
    shim: &Shim,
    meeting: &Rendezvous,
    testbed: &Testbed,
    recorder: &Recorder,
    timing: Timing,
) -> Made {
    let n = testbed.servers.len();
    let majority = n / 2 + 1;
    let bare = fault == Fault::ClockBumpMinority;
    let count = if bare { 1 } else { majority };
    meeting.arm();
    let wait = timing.stall + STOP_WAIT;
    let Some(holder) = meeting.holder(wait).await else {
        return (
            fault.label().to_owned(),
            Err(format!(
                "no holder was granted within {wait:?} of the arming"
            )),
        );
    };
    // More than the TTL: every key or lease the step reaches has expired at once.
    let step = timing.ttl * 2;
    clock::bump(shim, &testbed.servers, count, bare, &holder, recorder, step).await
}

/// Hold, break or caught, as jepsen-lite's runner reads a run with or without tokens.
fn observe(report: &Report, fences: bool) -> (Expect, String) {
    if fences {
        fenced_observation(report)
    } else if report.broke() {
        (Expect::Break, "break (no token to fence with)".to_owned())
    } else {
        (Expect::Hold, "hold".to_owned())
    }
}

fn figures(report: &Report, events: &[history::Event]) -> Figures {
    let failed = |kind: Kind| {
        events
            .iter()
            .filter(|e| e.f == "acquire" && e.kind == kind)
            .count()
    };
    Figures {
        grants: report.claims.claims,
        refused: failed(Kind::Fail),
        unavailable: failed(Kind::Info),
        claim_overlaps: report.claims.overlaps.len(),
        effect_overlaps: report.effects_unfenced.overlaps.len(),
        stale_accesses: report.effects_unfenced.stale_accesses,
        lost_unfenced: report.lost_unfenced.lost_increments,
        fenced_rejected: report.effects_fenced.rejections,
        lost_fenced: report.lost_fenced.lost_increments,
        token_order_violations: report.tokens.order_violations.len(),
        liveness_ms: report.liveness.first_acquire_after_ms,
    }
}

/// The verdict as the file spells it.
pub(super) fn verdict_text(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Inconclusive => "inconclusive",
        Verdict::Skipped => "skipped",
    }
}
