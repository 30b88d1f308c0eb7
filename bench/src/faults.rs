//! Under faults, N = 5: one master paused (`SIGSTOP`), two masters 20 ms away (the jepsen-lite
//! fault proxy), one master dead (`SIGKILL`). Acquisition latency and success rate; every
//! implementation bounded by a per-operation timeout and a time budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_testkit::{Mode, Modes, Proxy, RedisCluster};
use tokio::time::timeout;

use crate::peers::{Locker, TTL};
use crate::report::{num, Results};
use crate::sections::{interleaved_latency, throughput_run, Plan};
use crate::stats::Latency;

struct FaultStats {
    /// Time to the answer of every attempt that returned (granted or not).
    acquire: Latency,
    attempts: u64,
    granted: u64,
    note: String,
}

async fn measure(l: &Locker, prefix: &str, plan: &Plan) -> FaultStats {
    let mut s = FaultStats {
        acquire: Latency::new(),
        attempts: 0,
        granted: 0,
        note: String::new(),
    };
    let started = Instant::now();
    for i in 0..plan.fault_ops {
        if started.elapsed() > plan.fault_budget {
            s.note = format!(
                "time budget {:?} spent after {i} attempts",
                plan.fault_budget
            );
            break;
        }
        let key = format!("{prefix}:{}:{i}", l.name);
        let t0 = Instant::now();
        s.attempts += 1;
        match timeout(plan.op_timeout, l.acquire(&key, TTL)).await {
            Ok(Ok(held)) => {
                s.acquire.record(t0.elapsed());
                s.granted += 1;
                if timeout(plan.op_timeout, held.release()).await.is_err() {
                    s.note = format!(
                        "release never returned (timed out after {:?})",
                        plan.op_timeout
                    );
                    break;
                }
            }
            Ok(Err(e)) => {
                s.acquire.record(t0.elapsed());
                if s.note.is_empty() {
                    s.note = format!("failed: {}", e.chars().take(90).collect::<String>());
                }
            }
            Err(_) => {
                s.note = format!(
                    "acquire never returned (timed out after {:?})",
                    plan.op_timeout
                );
                break;
            }
        }
    }
    s
}

fn print_row(r: &mut Results, phase: &str, l: &Locker, s: &FaultStats) {
    let success = if s.attempts == 0 {
        f64::NAN
    } else {
        100.0 * s.granted as f64 / s.attempts as f64
    };
    println!(
        "  {phase:<14} {:<12} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  {}",
        l.name,
        s.attempts,
        num(success, 1),
        num(s.acquire.ms(0.5), 3),
        num(s.acquire.ms(0.99), 3),
        num(s.acquire.ms(0.999), 3),
        num(s.acquire.max_ms(), 3),
        s.note
    );
    for (metric, v) in [
        ("acquire_p50_ms", s.acquire.ms(0.5)),
        ("acquire_p99_ms", s.acquire.ms(0.99)),
        ("acquire_p999_ms", s.acquire.ms(0.999)),
        ("acquire_max_ms", s.acquire.max_ms()),
        ("success_pct", success),
        ("attempts", s.attempts as f64),
    ] {
        r.push_note(
            "faults",
            &l.name,
            5,
            1,
            &format!("{phase}_{metric}"),
            v,
            &s.note,
        );
    }
}

async fn lockers(urls: &[String], plan: &Plan) -> Vec<Arc<Locker>> {
    match Locker::all(urls, &plan.impls).await {
        Ok(l) => {
            let l: Vec<Arc<Locker>> = l.into_iter().map(Arc::new).collect();
            // Connections up before the fault.
            let _ = interleaved_latency(&l, 20, "fw", plan.op_timeout).await;
            l
        }
        Err(e) => {
            eprintln!("faults: cannot set up the implementations: {e}");
            Vec::new()
        }
    }
}

/// Every fault in turn; the cluster is healthy again afterwards.
pub(crate) async fn faults(cluster: &mut RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== under faults, N=5: acquire (one round) latency in ms over answered attempts; at most {} attempts or {:?} each, every operation bounded by {:?}",
        plan.fault_ops, plan.fault_budget, plan.op_timeout
    );
    println!(
        "  {:<14} {:<12} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}  note",
        "fault", "impl", "attempts", "ok %", "p50", "p99", "p999", "max"
    );
    let urls = cluster.urls()[..5].to_vec();
    let ports = cluster.ports()[..5].to_vec();

    let direct = lockers(&urls, plan).await;
    for l in &direct {
        let s = measure(l, "fh", plan).await;
        print_row(r, "healthy", l, &s);
    }

    // One master paused (SIGSTOP) after the connections are up.
    if let Some(m) = cluster.get_mut(4) {
        if let Err(e) = m.pause() {
            eprintln!("pause: {e}");
        }
    }
    for l in &direct {
        let s = measure(l, "fp", plan).await;
        print_row(r, "paused", l, &s);
    }
    if let Some(m) = cluster.get_mut(4) {
        if let Err(e) = m.resume() {
            eprintln!("resume: {e}");
        }
    }
    drop(direct);

    // Two masters 20 ms away: requests delayed by the proxy on two of five links. The healthy
    // baseline goes through the same proxy.
    match Proxy::start(1, &ports).await {
        Ok(proxy) => {
            let proxied = lockers(&proxy.urls(0), plan).await;
            for l in &proxied {
                let s = measure(l, "fhp", plan).await;
                print_row(r, "healthy_proxy", l, &s);
            }
            let slow = Modes {
                to_node: Mode::Delay(Duration::from_millis(20)),
                to_client: Mode::Pass,
            };
            proxy.set(0, 3, slow);
            proxy.set(0, 4, slow);
            for l in &proxied {
                let s = measure(l, "fs", plan).await;
                print_row(r, "slowed", l, &s);
            }
            proxy.heal_all();
        }
        Err(e) => eprintln!("proxy: {e}"),
    }

    // One master dead (SIGKILL) after the connections are up.
    let direct = lockers(&urls, plan).await;
    if let Some(m) = cluster.get_mut(4) {
        if let Err(e) = m.kill() {
            eprintln!("kill: {e}");
        }
    }
    for l in &direct {
        let s = measure(l, "fd", plan).await;
        print_row(r, "dead", l, &s);
    }
    drop(direct);
    if let Some(m) = cluster.get_mut(4) {
        if let Err(e) = m.restart() {
            eprintln!("restart: {e}");
        }
    }

    // Recovery: fresh managers on the same five masters (the fifth restarted), 64 tasks.
    println!(
        "  after the faults, all five masters up again (the fifth restarted), fresh managers, 64 tasks, {:?}:",
        plan.duration
    );
    for l in &lockers(&urls, plan).await {
        if l.is_blocking() {
            continue;
        }
        let t = throughput_run(l, 64, plan.duration, None, "frec", plan.op_timeout).await;
        let note = t
            .first_error
            .as_deref()
            .map(|e| format!("first failure: {}", e.chars().take(110).collect::<String>()))
            .unwrap_or_default();
        println!(
            "  {:<14} {:<12} {:>9.0} cycles/s {:>7} failures  {note}",
            "recovered",
            l.name,
            t.rate(),
            t.failures
        );
        r.push_note(
            "faults",
            &l.name,
            5,
            64,
            "recovered_cycles_per_s",
            t.rate(),
            &note,
        );
        r.push(
            "faults",
            &l.name,
            5,
            64,
            "recovered_failures",
            t.failures as f64,
        );
    }
}
