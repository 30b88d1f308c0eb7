//! `quorumlock-compare`: Redlock against etcd, ZooKeeper and PostgreSQL locks, under the same
//! faults and the same benchmark. Start with `scripts/install-deps.sh --compare`, then
//! `scripts/jepsen.sh compare --quick`.
//!
//! * `run`: every subject × fault cell, judged by jepsen-lite's checkers.
//! * `bench`: the benchmark of every subject.
//! * `page`: `compare.html` from `compare.json`.
//! * `all`: the three in turn.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use quorumlock_compare::comparison::{
    self, bench_table, catalog, cell_table, Fault, Provenance, Results, Sizes, SubjectKind, Timing,
};

#[derive(Parser)]
#[command(about = "Redlock against etcd, ZooKeeper and PostgreSQL: faults and benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every subject × fault cell; writes the cells of compare.json.
    Run(Choice),
    /// The benchmark of every subject; writes the benchmark of compare.json.
    Bench(Choice),
    /// compare.html from compare.json.
    Page(Out),
    /// run, bench and page.
    All(Choice),
}

#[derive(Args, Clone)]
struct Choice {
    /// A smoke: each subject with no fault and under a client pause; a small benchmark.
    #[arg(long)]
    quick: bool,
    /// Only these subjects (repeatable): redis-single, redlock-3, redlock-5, etcd,
    /// zookeeper, pg-advisory, pg-lease.
    #[arg(long = "subject")]
    subjects: Vec<String>,
    /// Only these faults (repeatable): none, client-pause, partition, server-pause,
    /// server-crash, data-loss, member-partition, packet-loss, orphans, clock-bump,
    /// clock-bump-minority.
    #[arg(long = "fault")]
    faults: Vec<String>,
    #[command(flatten)]
    out: Out,
}

#[derive(Args, Clone)]
struct Out {
    /// Where compare.json, compare.html and the cells' histories go. Defaults to the
    /// workspace's target/jepsen-lite.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Out {
    fn dir(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(comparison::default_dir)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(until_stopped(dispatch(cli.command))) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `work` until it ends or the process is asked to stop (`SIGINT`, `SIGTERM`). Then the
/// work is dropped, and with it the servers it started: their drops kill them and delete
/// their directories, which an exit by the signal's default action would leave behind.
async fn until_stopped(
    work: impl std::future::Future<Output = Result<bool, String>>,
) -> Result<bool, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| format!("listening for {name}: {e}"))
    };
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
    tokio::select! {
        done = work => done,
        _ = interrupt.recv() => Err("interrupted (SIGINT); the servers were stopped".to_owned()),
        _ = terminate.recv() => Err("terminated (SIGTERM); the servers were stopped".to_owned()),
    }
}

/// Runs the command; false when a cell did not observe what it expected.
async fn dispatch(command: Command) -> Result<bool, String> {
    match command {
        Command::Run(choice) => {
            let ok = run(&choice).await?;
            page(&choice.out)?;
            Ok(ok)
        }
        Command::Bench(choice) => {
            bench(&choice).await?;
            page(&choice.out)?;
            Ok(true)
        }
        Command::Page(out) => {
            page(&out)?;
            Ok(true)
        }
        Command::All(choice) => {
            let ok = run(&choice).await?;
            bench(&choice).await?;
            page(&choice.out)?;
            Ok(ok)
        }
    }
}

fn subjects(choice: &Choice) -> Result<Vec<SubjectKind>, String> {
    if choice.subjects.is_empty() {
        return Ok(SubjectKind::ALL.to_vec());
    }
    choice
        .subjects
        .iter()
        .map(|s| SubjectKind::parse(s))
        .collect()
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("quorumlock-compare {}", args.join(" "))
}

async fn run(choice: &Choice) -> Result<bool, String> {
    let started = Instant::now();
    let dir = choice.out.dir();
    let path = dir.join("compare.json");
    let chosen = subjects(choice)?;
    let mut cells = catalog(&chosen, choice.quick);
    if !choice.faults.is_empty() {
        let known: Vec<&str> = Fault::ALL.iter().map(|f| f.label()).collect();
        if let Some(bad) = choice.faults.iter().find(|f| !known.contains(&f.as_str())) {
            return Err(format!(
                "unknown fault {bad:?}: expected one of {}",
                known.join(", ")
            ));
        }
        cells.retain(|c| choice.faults.iter().any(|f| f == c.fault.label()));
        // A subject the chosen faults do not apply to is said, not dropped in silence.
        for subject in &chosen {
            if !cells.iter().any(|c| c.subject == *subject) {
                eprintln!(
                    "note: {} has no cell under {}: not applicable to it",
                    subject.label(),
                    choice.faults.join(", ")
                );
            }
        }
    }
    if cells.is_empty() {
        return Err(format!(
            "no cell to run: no chosen fault applies to a chosen subject{}",
            if choice.quick {
                " (the smoke runs only none and client-pause)"
            } else {
                ""
            }
        ));
    }
    let timing = Timing::new(choice.quick);
    let histories = dir.join("compare");
    let mut rows = Vec::with_capacity(cells.len());
    for (i, cell) in cells.iter().enumerate() {
        eprintln!(
            "[{}/{}] {} under {}: expecting {}",
            i + 1,
            cells.len(),
            cell.subject.label(),
            cell.fault.label(),
            cell.expect
        );
        let row = comparison::run(*cell, timing, &histories).await;
        eprintln!(
            "    observed {} in {:.0} s: {}{}",
            row.observed,
            row.seconds,
            row.verdict.to_uppercase(),
            if row.why.is_empty() {
                String::new()
            } else {
                format!(" ({})", row.why)
            }
        );
        rows.push(row);
    }
    println!("{}", cell_table(&rows));
    let ok = rows.iter().all(|r| r.verdict == "pass");
    let mut results = Results::load(&path)?;
    results.merge_cells(rows);
    results.run = Some(Provenance {
        command: command_line(),
        quick: choice.quick,
        seconds: started.elapsed().as_secs_f64(),
    });
    results.save(&path)?;
    println!("wrote {}", path.display());
    Ok(ok)
}

async fn bench(choice: &Choice) -> Result<(), String> {
    let started = Instant::now();
    let path = choice.out.dir().join("compare.json");
    let sizes = Sizes::new(choice.quick);
    let mut rows = Vec::new();
    for subject in subjects(choice)? {
        eprintln!("benchmark of {}", subject.label());
        rows.push(comparison::bench(subject, sizes).await);
    }
    println!("{}", bench_table(&rows));
    let mut results = Results::load(&path)?;
    results.bench = rows;
    results.bench_run = Some(Provenance {
        command: command_line(),
        quick: choice.quick,
        seconds: started.elapsed().as_secs_f64(),
    });
    results.save(&path)?;
    println!("wrote {}", path.display());
    Ok(())
}

fn page(out: &Out) -> Result<(), String> {
    let dir = out.dir();
    let results = Results::load(&dir.join("compare.json"))?;
    let path = dir.join("compare.html");
    std::fs::write(&path, comparison::html(&results))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("page: {}", path.display());
    Ok(())
}
