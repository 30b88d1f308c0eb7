//! `quorumlock status`: what each node holds for a resource, read directly from the nodes; or,
//! with `--slot`, what a quorum says of a `--once` slot.

use std::time::Duration;

use quorumlock::{LockError, SlotRecord, SlotStatus};
use serde::Serialize;

use crate::args::{Connection, StatusArgs};
use crate::duration::show;
use crate::exit;
use crate::failure;
use crate::survey::{survey, NodeReport};

/// The whole report, as printed by `--json`.
#[derive(Debug, Serialize)]
struct Report<'a> {
    resource: String,
    key: String,
    /// `held` (the key exists on a quorum), `free` (on no node), `partial`, or `unknown` (too
    /// few nodes answered to tell).
    state: &'static str,
    held_on: usize,
    answered: usize,
    quorum: usize,
    /// The holder's identity when the lock was taken with one (`quorumlock elect`,
    /// `Election::campaign`: it is stored in the lock value), as found on the most nodes;
    /// `null` for a plain lock, whose value says nothing about its owner.
    owner: Option<String>,
    nodes: &'a [NodeReport],
}

/// A slot's report, as printed by `--json`.
#[derive(Debug, Serialize)]
struct SlotReport {
    job: String,
    slot: String,
    /// `free`, `running`, `completed` or `abandoned`.
    state: &'static str,
    /// Who claimed it last (the runner's host name), if known.
    runner: Option<String>,
    /// How many times it was claimed.
    attempts: Option<u64>,
}

/// Runs `quorumlock status`; returns the exit code.
pub(crate) async fn run(locks: &quorumlock::Redlock, conn: &Connection, args: StatusArgs) -> u8 {
    if let Some(slot) = &args.slot {
        return slot_status(locks, conn, &args, slot).await;
    }
    let survey = survey(locks, conn, &args.resource).await;
    let report = Report {
        resource: args.resource.clone(),
        key: survey.key.replace('\u{1f}', "\\x1f"),
        state: survey.state(),
        held_on: survey.held_on(),
        answered: survey.answered(),
        quorum: survey.quorum,
        owner: survey.owner(),
        nodes: &survey.nodes,
    };
    if args.json {
        if let Err(code) = print_json(&report) {
            return code;
        }
    } else {
        print_table(&report);
    }
    if survey.is_misconfigured() {
        eprintln!("quorumlock: the masters refused the configuration (retrying cannot help)");
        exit::MISCONFIGURED
    } else if survey.has_quorum() {
        0
    } else {
        eprintln!(
            "quorumlock: only {} of {} node(s) answered, a quorum needs {}",
            report.answered,
            report.nodes.len(),
            report.quorum
        );
        exit::UNAVAILABLE
    }
}

/// `status --slot`: the slot's state as a quorum of masters reports it.
async fn slot_status(
    locks: &quorumlock::Redlock,
    conn: &Connection,
    args: &StatusArgs,
    slot: &str,
) -> u8 {
    let job = &args.resource;
    let status = match locks.slots().status(job, slot).await {
        Ok(status) => status,
        Err(error @ LockError::InvalidArgument(_)) => {
            eprintln!("quorumlock: {error}");
            return exit::USAGE;
        }
        Err(error) => {
            let what = format!("slot {slot:?} of {job:?} could not be read");
            return failure::report(locks, conn, job, &what, &error).await;
        }
    };
    let (state, record): (_, Option<&SlotRecord>) = match &status {
        SlotStatus::Free => ("free", None),
        SlotStatus::Running(record) => ("running", Some(record)),
        SlotStatus::Completed(record) => ("completed", Some(record)),
        SlotStatus::Abandoned(record) => ("abandoned", Some(record)),
        _ => ("unknown", None),
    };
    let report = SlotReport {
        job: job.clone(),
        slot: slot.to_string(),
        state,
        runner: record.and_then(|r| r.runner.clone()),
        attempts: record.map(|r| u64::from(r.attempts)),
    };
    if args.json {
        return print_json(&report).err().unwrap_or(0);
    }
    let by = match (&report.runner, report.attempts) {
        (Some(runner), Some(n)) => format!(" (by {runner:?}, attempt {n})"),
        (None, Some(n)) => format!(" (attempt {n})"),
        _ => String::new(),
    };
    println!("slot {slot:?} of {job:?}: {state}{by}");
    0
}

/// Prints `value` as JSON; `Err` is the exit code when it cannot be rendered.
fn print_json(value: &impl Serialize) -> Result<(), u8> {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            println!("{text}");
            Ok(())
        }
        Err(error) => {
            eprintln!("quorumlock: cannot render JSON: {error}");
            Err(exit::UNAVAILABLE)
        }
    }
}

/// The readable table.
fn print_table(report: &Report<'_>) {
    let rows: Vec<[String; 5]> = report
        .nodes
        .iter()
        .map(|n| match &n.error {
            Some(error) => [
                n.node.clone(),
                if n.refused { "refused" } else { "unreachable" }.into(),
                "-".into(),
                "-".into(),
                error.clone(),
            ],
            None => [
                n.node.clone(),
                match n.held {
                    Some(true) => "held".into(),
                    _ => "free".into(),
                },
                match (n.held, n.ttl_ms) {
                    (Some(true), Some(ms)) => show(Duration::from_millis(ms)),
                    (Some(true), None) => "no expiry".into(),
                    _ => "-".into(),
                },
                match (n.epoch, n.epoch_age_ms) {
                    (Some("stamped"), Some(ms)) => {
                        format!("{} old", show(Duration::from_millis(ms)))
                    }
                    (Some(state), _) => state.to_string(),
                    (None, _) => "-".into(),
                },
                n.rtt_ms.map_or("-".into(), |ms| format!("{ms:.2} ms")),
            ],
        })
        .collect();
    let header = ["NODE", "KEY", "TTL", "EPOCH", "RTT"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    let summary = match report.state {
        "unknown" => format!(
            "unknown: only {} of {} node(s) answered, quorum {}",
            report.answered,
            report.nodes.len(),
            report.quorum
        ),
        state => {
            let owner = match &report.owner {
                Some(identity) => format!("held by {identity:?}"),
                None => "owner unknown (the lock value carries no identity)".to_string(),
            };
            format!(
                "{state} on {} of {} node(s), quorum {}; {owner}",
                report.held_on,
                report.nodes.len(),
                report.quorum
            )
        }
    };
    println!(
        "resource {:?} (key {}): {summary}",
        report.resource, report.key
    );
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
}
