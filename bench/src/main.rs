//! quorumlock-bench: quorumlock against a single Redis lock, the `rslock` and `redlock` crates
//! and a minimal reference Redlock, on real `redis-server` masters this binary starts itself,
//! all in one run.
//!
//! Sections: uncontended latency (N = 1, 3, 5, 7), throughput (1–256 tasks, N = 1 and 5),
//! contention (16 contenders, one key), faults (paused, slowed, dead master), options' cost
//! (fencing, restart protection, auto-extension), memory (VmRSS over many cycles), semaphores
//! and read-write locks against the same primitives on one master (`--only permits`) and the
//! scheduler (1000 interval jobs on 5 `quorumlock-scheduler` workers; `--only scheduler`). Prints a
//! table per section and the targets of the benchmark issue as ratios from the same run, and
//! writes `results.csv` and SVG charts under `target/bench/` (see `--out`).
//!
//! Run it with `scripts/bench.sh` (release build). Numbers on a shared machine are noisy;
//! compare ratios within one run, not absolute times across runs.

mod faults;
mod handoff;
mod minimal;
mod peers;
mod permits;
mod report;
mod scheduler;
mod sections;
mod stats;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use quorumlock_testkit::RedisCluster;

use report::Results;
use sections::Plan;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    Latency,
    Throughput,
    Contention,
    Faults,
    Options,
    Memory,
    Handoff,
    /// Semaphores and read-write locks, N = 5 against N = 1.
    Permits,
    Scheduler,
}

/// End-to-end benchmark of quorumlock and its peers on local redis-server masters.
#[derive(Debug, Parser)]
#[command(name = "quorumlock-bench")]
struct Args {
    /// Short runs everywhere (a smoke test, numbers not meaningful).
    #[arg(long)]
    quick: bool,
    /// Run only these sections (repeatable); all by default.
    #[arg(long, value_enum)]
    only: Vec<Section>,
    /// Lock+release cycles of the memory section (the figure is 1000000).
    #[arg(long)]
    cycles: Option<u64>,
    /// Length of each throughput and contention run, in seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Uncontended samples per implementation and N.
    #[arg(long)]
    samples: Option<usize>,
    /// Only these implementations (repeatable): quorumlock, minimal, rslock, redlock. For
    /// profiling one of them; the targets need quorumlock, rslock and minimal.
    #[arg(long = "impl", value_parser = ["quorumlock", "minimal", "rslock", "redlock"])]
    impls: Vec<String>,
    /// Only these master counts in the throughput section (repeatable; 1 to 7): for profiling.
    #[arg(long = "nodes", value_parser = clap::value_parser!(u16).range(1..=7))]
    nodes: Vec<u16>,
    /// Only these task counts in the throughput section (repeatable): for profiling.
    #[arg(long = "tasks", value_parser = clap::value_parser!(u16).range(1..))]
    tasks: Vec<u16>,
    /// Jobs of the scheduler section (1 s period each, on 5 workers); 1000 by default.
    #[arg(long)]
    jobs: Option<usize>,
    /// Measured slots (seconds) of the scheduler section; 20 by default.
    #[arg(long)]
    slots: Option<usize>,
    /// Node timeout of the scheduler section's managers, in ms (the library's 50 ms unless set).
    #[arg(long)]
    sched_node_timeout_ms: Option<u64>,
    /// Jitter of the scheduler section's jobs, in ms (none unless set).
    #[arg(long, default_value_t = 0)]
    sched_jitter_ms: u64,
    /// Retry delay of the scheduler section's managers, in ms (the library's 200 ms unless set).
    #[arg(long)]
    sched_retry_delay_ms: Option<u64>,
    /// Where the CSV and the charts go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let plan = Plan {
        samples: args.samples.unwrap_or(if args.quick { 100 } else { 2000 }),
        duration: Duration::from_secs_f64(
            args.duration
                .unwrap_or(if args.quick { 0.3 } else { 2.0 })
                .max(0.05),
        ),
        cycles: args
            .cycles
            .unwrap_or(if args.quick { 5_000 } else { 200_000 }),
        fault_ops: if args.quick { 50 } else { 1000 },
        fault_budget: Duration::from_secs(if args.quick { 3 } else { 12 }),
        op_timeout: Duration::from_secs(if args.quick { 2 } else { 5 }),
        impls: args.impls.clone(),
        throughput_nodes: or_default(&args.nodes, &[1, 5]),
        throughput_tasks: or_default(&args.tasks, &[1, 16, 64, 256]),
        sched_jobs: args
            .jobs
            .unwrap_or(if args.quick { 100 } else { 1000 })
            .max(1),
        sched_slots: args.slots.unwrap_or(if args.quick { 3 } else { 20 }).max(1),
        sched_node_timeout: args.sched_node_timeout_ms.map(Duration::from_millis),
        sched_jitter: Duration::from_millis(args.sched_jitter_ms),
        sched_retry_delay: args.sched_retry_delay_ms.map(Duration::from_millis),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // Everything runs in a spawned task, on a worker thread, as in an application (not on the
    // thread that blocks on the runtime).
    let code = runtime
        .block_on(async move { tokio::spawn(async move { run(&args, &plan).await }).await })
        .unwrap_or_else(|e| {
            eprintln!("bench task: {e}");
            std::process::ExitCode::FAILURE
        });
    // A peer stuck in a blocking call must not hold the process at exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The values given on the command line, or `default` when none were.
fn or_default(given: &[u16], default: &[usize]) -> Vec<usize> {
    if given.is_empty() {
        default.to_vec()
    } else {
        given.iter().map(|&v| usize::from(v)).collect()
    }
}

async fn run(args: &Args, plan: &Plan) -> std::process::ExitCode {
    let wanted = |s: Section| args.only.is_empty() || args.only.contains(&s);
    let started = Instant::now();
    let mut cluster = match RedisCluster::start(7) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start redis-server masters: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!(
        "quorumlock-bench: 7 local redis-server masters (N uses the first N); TTL {:?}; {} CPUs; \
         quorumlock node timeout 50 ms (default); peers have no per-node timeout setting \
         (rslock and the minimal reference run on the redis crate's 500 ms response timeout, \
         redlock on blocking sockets without one); redlock calls run on tokio's blocking pool",
        peers::TTL,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut results = Results::default();
    if wanted(Section::Latency) {
        sections::latency(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Throughput) {
        sections::throughput(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Contention) {
        sections::contention(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Options) {
        sections::options(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Handoff) {
        handoff::handoff(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Permits) {
        permits::permits(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Scheduler) {
        scheduler::scheduler(&cluster, plan, &mut results).await;
    }
    if wanted(Section::Memory) {
        sections::memory(&cluster, plan, &mut results).await;
    }
    // Last: faults pause, kill and restart masters.
    if wanted(Section::Faults) {
        faults::faults(&mut cluster, plan, &mut results).await;
    }
    print!("{}", report::targets(&results));
    match report::write_all(
        &args.out,
        &results,
        &["quorumlock", "minimal", "rslock", "redlock"],
    ) {
        Ok(paths) => println!("\nwrote {}", paths.join(", ")),
        Err(e) => {
            eprintln!("writing results under {}: {e}", args.out.display());
            return std::process::ExitCode::FAILURE;
        }
    }
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    std::process::ExitCode::SUCCESS
}
