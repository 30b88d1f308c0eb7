//! jepsen-lite: run fault-injection scenarios against quorumlock and check the histories.
//!
//! `jepsen-lite matrix --quick` runs the quick matrix and prints the table; `jepsen-lite run
//! --scenario NAME --seed S` replays one run; `jepsen-lite list` lists the scenarios.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use jepsen_lite::clockshim::Clocks;
use jepsen_lite::outcome::{Outcome, Verdict};
use jepsen_lite::run;
use jepsen_lite::{report, scenario};

#[derive(Parser)]
#[command(
    name = "jepsen-lite",
    about = "Fault injection for quorumlock on real redis-server processes"
)]
struct Cli {
    /// Where run directories and reports go.
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args)]
/// What a soak runs.
struct SoakArgs {
    /// How long, minutes.
    #[arg(long)]
    minutes: f64,
    /// At most this many runs (seeds).
    #[arg(long)]
    seeds: Option<u64>,
    /// The first run's seed (the next runs take the following ones; default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// Each run's length, seconds. A run spends its first moments starting masters and
    /// clients and its last seconds healed (liveness is owed after the heal), so longer runs
    /// spend more of the soak under fault.
    #[arg(long, default_value_t = 60)]
    run_seconds: u64,
    /// Masters, a comma-separated list cycled through.
    #[arg(long, default_value = "1,3,5,7", value_delimiter = ',')]
    nodes: Vec<usize>,
    /// Fencing and restart protection off: reports the violation rate (runs with violations
    /// are listed, and the exit status says nothing).
    #[arg(long)]
    unprotected: bool,
    /// Run a library mutant (see `scenario::COMPOSED_MUTANTS`) and stop at the first run that
    /// catches it: how many seeds the composed nemesis needs.
    #[arg(long)]
    mutation: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one scenario.
    Run {
        /// Scenario name (see `list`).
        #[arg(long)]
        scenario: String,
        /// Seed (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Duration of random scenarios, seconds.
        #[arg(long, default_value_t = 20)]
        duration: u64,
        /// Exit 0 when the scenario was skipped (a missing prerequisite); by default a skip
        /// fails, since it proves nothing.
        #[arg(long)]
        allow_skip: bool,
    },
    /// Run the matrix and print the table; exits 1 unless every run passed: a failed or
    /// inconclusive run fails the matrix, and so does a skipped one unless --allow-skip.
    Matrix {
        /// Only the quick subset, short random runs.
        #[arg(long)]
        quick: bool,
        /// Seed (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Do not fail the matrix for scenarios skipped for a missing prerequisite (they are
        /// still counted and listed).
        #[arg(long)]
        allow_skip: bool,
    },
    /// Composed random runs back to back for `--minutes`, cycling over N = 1, 3, 5, 7 masters
    /// (fencing and restart protection on unless --unprotected); prints grants, faults by kind,
    /// violations by checker and the seed of every run that did not pass. Exits 1 unless every
    /// run passed.
    Soak(SoakArgs),
    /// List the scenarios.
    List,
    /// The cron workload: 5 scheduler workers with skewed clocks run 3 jobs under pauses,
    /// kills, a master crash and a partition; every slot must run once and in time. Exits 1
    /// unless it passed (a mutant must fail).
    Cron {
        /// Seed (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// How long the workers run, seconds (default 45, as --quick).
        #[arg(long)]
        duration: Option<u64>,
        /// Run broken workers, which must be caught.
        #[arg(long, value_enum)]
        mutant: Option<jepsen_lite::cron::worker::Mutant>,
        /// The quick run of scripts/jepsen.sh --quick (45 s, one fault of each kind).
        #[arg(long)]
        quick: bool,
    },
    /// The election, lock-all, semaphore or rw-lock workload: 5 workers campaign for one name
    /// (with 2 observers), lock random sets of resources in random orders, take one of 2
    /// permits, or read and write a table under a read-write lock, fenced, under holder
    /// pauses and kills, a master crash, a minority partition and a master pause. Exits 1
    /// unless it passed (a mutant must fail).
    Workload {
        /// Which workload.
        #[arg(long, value_enum)]
        kind: jepsen_lite::workload::WorkloadKind,
        /// Seed (default: random, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// How long the workers run, seconds (default 34, as --quick).
        #[arg(long)]
        duration: Option<u64>,
        /// Run broken workers, which must be caught.
        #[arg(long, value_enum)]
        mutant: Option<jepsen_lite::workload::Mutant>,
        /// The quick run of scripts/jepsen.sh --quick (34 s, each fault once).
        #[arg(long)]
        quick: bool,
    },
    /// A workload worker or observer (started by the controller).
    #[command(hide = true)]
    WorkloadWorker {
        #[arg(long)]
        config: String,
    },
    /// A cron worker (started by the controller).
    #[command(hide = true)]
    CronWorker {
        #[arg(long)]
        config: String,
        #[arg(long, value_enum)]
        mutant: Option<jepsen_lite::cron::worker::Mutant>,
    },
    /// A lock client (started by the controller).
    #[command(hide = true)]
    Client {
        #[arg(long)]
        config: String,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Cmd::Client { config } = &cli.command {
        std::process::exit(client_main(config));
    }
    if let Cmd::CronWorker { config, mutant } = &cli.command {
        std::process::exit(cron_worker_main(config, *mutant));
    }
    if let Cmd::WorkloadWorker { config } = &cli.command {
        std::process::exit(workload_worker_main(config));
    }
    let out = cli.out.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/jepsen-lite"
        ))
    });
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("jepsen-lite: cannot create {}: {e}", out.display());
        std::process::exit(2);
    }
    let out = out.canonicalize().unwrap_or(out);
    // Before any thread starts: every master is launched through the clock-shim wrapper.
    // Per process: a concurrent jepsen-lite must not rewrite a wrapper or shim in use here.
    let clock_dir = out.join("clock").join(std::process::id().to_string());
    let clocks = match Clocks::install(&clock_dir) {
        Ok((clocks, wrapper)) => {
            std::env::set_var("QUORUMLOCK_REDIS_SERVER", wrapper);
            Some(clocks)
        }
        Err(e) => {
            eprintln!("jepsen-lite: clock faults disabled: {e}");
            None
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("jepsen-lite: {e}");
            std::process::exit(2);
        }
    };
    let code = rt.block_on(async {
        tokio::select! {
            code = controller(cli.command, out, clocks) => code,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\njepsen-lite: interrupted; stopping every process it started");
                130
            }
        }
    });
    // Dropping the runtime drops the run: clients killed, masters killed, clocks reset.
    drop(rt);
    let _ = std::fs::remove_dir_all(&clock_dir);
    std::process::exit(code);
}

fn client_main(config: &str) -> i32 {
    let cfg = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("client: bad config: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("client: {e}");
            return 2;
        }
    };
    match rt.block_on(jepsen_lite::client::run(cfg)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("client: {e}");
            1
        }
    }
}

fn cron_worker_main(config: &str, mutant: Option<jepsen_lite::cron::worker::Mutant>) -> i32 {
    let cfg = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cron-worker: bad config: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cron-worker: {e}");
            return 2;
        }
    };
    match rt.block_on(jepsen_lite::cron::worker::run(cfg, mutant)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cron-worker: {e}");
            1
        }
    }
}

fn workload_worker_main(config: &str) -> i32 {
    let cfg = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("workload-worker: bad config: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("workload-worker: {e}");
            return 2;
        }
    };
    match rt.block_on(jepsen_lite::workload::worker::run(cfg)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("workload-worker: {e}");
            1
        }
    }
}

fn seed_or_random(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000)
            .unwrap_or(1)
    })
}

async fn one(
    sc: &scenario::Scenario,
    seed: u64,
    duration: Duration,
    out: &std::path::Path,
    clocks: Option<&Clocks>,
    pb: Option<ProgressBar>,
) -> Outcome {
    match run::run(sc, seed, duration, out, clocks, pb).await {
        Ok(o) => o,
        Err(e) => Outcome {
            scenario: sc.name.to_string(),
            kind: sc.kind.to_string(),
            expected: sc.expect,
            observed: format!("error: {e}"),
            verdict: Verdict::Fail,
            seed,
            seconds: 0.0,
            report: None,
            orphan_keys: 0,
            orphan_lifetime_ms: None,
            notes: Vec::new(),
            evidence: jepsen_lite::evidence::Evidence::default(),
            why: format!("the run did not complete: {e}"),
            fenced: String::new(),
            dir: out.join(format!("{}-{seed}", sc.name)),
            faults: Default::default(),
            violations: Vec::new(),
        },
    }
}

/// Whether a run lets the command succeed: a pass, or a skip when skips are allowed.
fn acceptable(outcome: &Outcome, allow_skip: bool) -> bool {
    match outcome.verdict {
        Verdict::Pass => true,
        Verdict::Skipped => allow_skip,
        Verdict::Fail | Verdict::Inconclusive => false,
    }
}

async fn controller(cmd: Cmd, out: PathBuf, clocks: Option<Clocks>) -> i32 {
    match cmd {
        Cmd::List => {
            for s in scenario::catalog() {
                println!(
                    "{:<28} {:<13} {:<6} {}{}",
                    s.name,
                    s.kind,
                    s.expect.to_string(),
                    s.about,
                    if s.quick { "" } else { " (full matrix only)" }
                );
            }
            0
        }
        Cmd::Run {
            scenario: name,
            seed,
            duration,
            allow_skip,
        } => {
            let Some(sc) = scenario::find(&name) else {
                eprintln!("jepsen-lite: unknown scenario {name:?}; see `jepsen-lite list`");
                return 2;
            };
            if let Some(why) = sc.mutant_unavailable() {
                eprintln!("jepsen-lite: scenario {name}: {why}");
                return 2;
            }
            let seed = seed_or_random(seed);
            println!("jepsen-lite: scenario {name}, seed {seed}");
            let pb = spinner();
            let o = one(
                &sc,
                seed,
                Duration::from_secs(duration),
                &out,
                clocks.as_ref(),
                Some(pb.clone()),
            )
            .await;
            pb.finish_and_clear();
            print!("{}", report::table(std::slice::from_ref(&o)));
            if let Some(r) = &o.report {
                println!("{}", r.summary());
            }
            for n in &o.notes {
                println!("note: {n}");
            }
            match o.orphan_lifetime_ms {
                Some(ms) => println!("lock keys all gone {ms} ms after the faults were lifted"),
                None => println!("lock keys outlived one TTL after the faults were lifted"),
            }
            println!("seed {seed}; files in {}", o.dir.display());
            i32::from(!acceptable(&o, allow_skip))
        }
        Cmd::Matrix {
            quick,
            seed,
            allow_skip,
        } => {
            let seed = seed_or_random(seed);
            println!(
                "jepsen-lite: matrix{}, seed {seed}",
                if quick { " --quick" } else { "" }
            );
            let duration = Duration::from_secs(if quick { 8 } else { 45 });
            let all: Vec<_> = scenario::catalog()
                .into_iter()
                .filter(|s| !quick || s.quick)
                .collect();
            let pb = ProgressBar::new(all.len() as u64);
            pb.set_style(
                ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let mut outcomes = Vec::new();
            for sc in &all {
                let o = one(sc, seed, duration, &out, clocks.as_ref(), Some(pb.clone())).await;
                pb.suspend(|| {
                    println!(
                        "{:<31} expected {:<6} observed {:<22} {:?}",
                        o.scenario,
                        o.expected.to_string(),
                        o.observed,
                        o.verdict
                    )
                });
                outcomes.push(o);
                pb.inc(1);
            }
            pb.finish_and_clear();
            print!("{}", report::table(&outcomes));
            let path = out.join("matrix.html");
            let _ = report::write_matrix_html(&path, &outcomes, seed);
            let _ = std::fs::write(
                out.join("matrix.json"),
                serde_json::to_vec_pretty(&outcomes).unwrap_or_default(),
            );
            let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
            println!(
                "{} passed, {} failed, {} inconclusive, {} skipped{}",
                count(Verdict::Pass),
                count(Verdict::Fail),
                count(Verdict::Inconclusive),
                count(Verdict::Skipped),
                if count(Verdict::Skipped) > 0 && !allow_skip {
                    " (a skip fails the matrix: install what it needs, or pass --allow-skip)"
                } else {
                    ""
                }
            );
            let longest = outcomes.iter().filter_map(|o| o.orphan_lifetime_ms).max();
            let outlived: Vec<&str> = outcomes
                .iter()
                .filter(|o| o.report.is_some() && o.orphan_lifetime_ms.is_none())
                .map(|o| o.scenario.as_str())
                .collect();
            println!(
                "lock keys left behind lived at most {} ms after the faults were lifted{}",
                longest.unwrap_or(0),
                if outlived.is_empty() {
                    String::new()
                } else {
                    format!("; outlived one TTL in: {}", outlived.join(", "))
                }
            );
            println!("seed {seed}; report {}", path.display());
            i32::from(!outcomes.iter().all(|o| acceptable(o, allow_skip)))
        }
        Cmd::Soak(args) => soak(args, &out, clocks.as_ref()).await,
        Cmd::Cron {
            seed,
            duration,
            mutant,
            quick,
        } => {
            let mut opts = jepsen_lite::cron::Options::quick(seed_or_random(seed), mutant);
            if let (Some(secs), false) = (duration, quick) {
                opts.duration = Duration::from_secs(secs);
            }
            jepsen_lite::cron::run(opts, &out).await
        }
        Cmd::Workload {
            kind,
            seed,
            duration,
            mutant,
            quick,
        } => {
            let mut opts =
                jepsen_lite::workload::Options::quick(kind, seed_or_random(seed), mutant);
            if let (Some(secs), false) = (duration, quick) {
                opts.duration = Duration::from_secs(secs);
            }
            jepsen_lite::workload::run(opts, &out).await
        }
        Cmd::Client { .. } | Cmd::CronWorker { .. } | Cmd::WorkloadWorker { .. } => 2,
    }
}

fn spinner() -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

async fn soak(args: SoakArgs, out: &std::path::Path, clocks: Option<&Clocks>) -> i32 {
    let SoakArgs {
        minutes,
        seeds,
        seed,
        run_seconds,
        nodes,
        unprotected,
        mutation,
    } = args;
    let mutation = match mutation.as_deref() {
        None => None,
        Some(name) => match scenario::COMPOSED_MUTANTS.iter().find(|m| **m == name) {
            Some(m) => Some(*m),
            None => {
                eprintln!(
                    "jepsen-lite: unknown mutation {name:?}; one of {}",
                    scenario::COMPOSED_MUTANTS.join(", ")
                );
                return 2;
            }
        },
    };
    if let Some(why) = mutation.and_then(|m| {
        scenario::mutants_missing(
            m,
            &format!("scripts/jepsen.sh soak --minutes {minutes} --mutation {m}"),
        )
    }) {
        eprintln!("jepsen-lite: soak: {why}");
        return 2;
    }
    let first = seed_or_random(seed);
    let scenarios: Vec<scenario::Scenario> = nodes
        .iter()
        .map(|&n| scenario::Scenario {
            mutation,
            ..scenario::composed(
                if unprotected {
                    "composed-unprotected"
                } else {
                    "composed"
                },
                n,
                !unprotected,
            )
        })
        .map(
            |s| match scenario::find(&format!("composed-n{}", s.nodes)) {
                // The catalog's name, so that `run --scenario` replays it.
                Some(named) if !unprotected => scenario::Scenario { mutation, ..named },
                _ => s,
            },
        )
        .collect();
    if scenarios.is_empty() || minutes.is_nan() || minutes <= 0.0 {
        eprintln!("jepsen-lite: soak needs --minutes above 0 and at least one --nodes value");
        return 2;
    }
    println!(
        "jepsen-lite: soak for {minutes} min, {run_seconds} s runs, N = {nodes:?}, first seed {first}{}",
        if unprotected { ", fencing and restart protection OFF" } else { "" }
    );
    let end = std::time::Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let mut summary = jepsen_lite::soak::Summary::default();
    let mut rows = Vec::new();
    let mut i = 0u64;
    while std::time::Instant::now() < end && seeds.is_none_or(|s| i < s) {
        let sc = &scenarios[usize::try_from(i).unwrap_or(0) % scenarios.len()];
        let s = first.wrapping_add(i);
        let pb = spinner();
        let o = one(
            sc,
            s,
            Duration::from_secs(run_seconds),
            out,
            clocks,
            Some(pb.clone()),
        )
        .await;
        pb.finish_and_clear();
        println!(
            "{:<26} N={} seed {s:<8} {:<13} {}",
            o.scenario,
            sc.nodes,
            format!("{:?}", o.verdict),
            o.observed
        );
        summary.add(&o);
        rows.push(report::soak::RunRow::of(&o));
        // Rewritten after each run, so that an interrupted soak still leaves its page.
        let page = out.join("soak.html");
        let _ = report::soak::write_soak_html(&page, &summary, &rows, run_seconds);
        i += 1;
        // Caught: a checker saw a violation (not a run that failed for another reason). Also
        // in a run that is inconclusive for too little activity (a mutant that breaks most
        // requests): the minimum keeps a hold from passing vacuously, and a violation seen is
        // seen all the same.
        if mutation.is_some() && !o.violations.is_empty() {
            let seen: Vec<String> = o
                .violations
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            println!(
                "mutant {} caught by run {i} (seed {s}, {:?}): {}; {}",
                mutation.unwrap_or_default(),
                o.verdict,
                seen.join(", "),
                o.observed
            );
            return 0;
        }
    }
    if let Some(m) = mutation {
        print!("{summary}");
        println!("mutant {m} NOT caught in {i} runs");
        return 1;
    }
    print!("{summary}");
    println!("summary page {}", out.join("soak.html").display());
    println!(
        "replay one: jepsen-lite run --scenario NAME --seed S --duration {run_seconds} (N other than 1, 3, 5, 7: soak --nodes N --seed S --seeds 1)"
    );
    i32::from(!unprotected && !summary.failing.is_empty())
}
