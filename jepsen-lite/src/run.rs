//! One run of one scenario: start the environment, play the script or the random schedule,
//! heal, check the history, judge, and write the files.

use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::checker::{self, Params};
use crate::clock::ms;
use crate::clockshim::Clocks;
use crate::env::{Env, Error};
use crate::evidence::Evidence;
use crate::history::{self, Event};
use crate::leaks::leaked_keys;
use crate::nemesis::iptables;
use crate::outcome::{Outcome, Verdict};
use crate::scenario::{Expect, RandomFault, Scenario, Script};
use crate::verdict::{
    composed_observation, fenced_observation, judge, orphans_outlived_cleanup, overall_lifetime,
    pivot, ClaimsCheck,
};
use crate::{random, scenario};

/// Runs one scenario and writes `history.jsonl`, `resource.jsonl` and `results.json` into a
/// fresh directory under `out`.
///
/// # Errors
///
/// When the environment cannot be set up or a scripted step times out.
pub async fn run(
    sc: &Scenario,
    seed: u64,
    duration: Duration,
    out: &Path,
    clocks: Option<&Clocks>,
    progress: Option<ProgressBar>,
) -> Result<Outcome, Error> {
    let started = Instant::now();
    let dir = out.join(format!("{}-{seed}", sc.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let skip = |why: String| Outcome {
        scenario: sc.name.to_string(),
        kind: sc.kind.to_string(),
        expected: sc.expect,
        observed: why,
        verdict: Verdict::Skipped,
        seed,
        seconds: 0.0,
        report: None,
        orphan_keys: 0,
        orphan_lifetime_ms: None,
        notes: Vec::new(),
        evidence: Evidence::default(),
        why: String::new(),
        fenced: String::new(),
        dir: dir.clone(),
        faults: Default::default(),
        violations: Vec::new(),
    };
    // A composed run draws kernel partitions and packet loss too: without them it would test
    // less than it says.
    let needs_iptables = matches!(
        sc.script,
        Script::Random(RandomFault::KernelDrop | RandomFault::PacketLoss) | Script::Composed
    );
    if needs_iptables && !iptables::available() {
        return Ok(skip(
            "skipped: iptables not available (scripts/jepsen.sh installs it)".into(),
        ));
    }
    let needs_loss = matches!(
        sc.script,
        Script::Random(RandomFault::PacketLoss) | Script::Composed
    );
    if needs_loss && !iptables::statistic_available() {
        return Ok(skip(
            "skipped: the iptables statistic match is not available".into(),
        ));
    }
    let needs_clock = matches!(
        sc.script,
        Script::ClockJump(_) | Script::ClockRate(_) | Script::Composed
    );
    if needs_clock && clocks.is_none() {
        return Ok(skip("skipped: clock shim unavailable (no cc?)".into()));
    }
    // Else its client would refuse the mutant and the run would fail waiting for it.
    if let Some(why) = sc.mutant_unavailable() {
        return Ok(skip(format!("skipped: {why}")));
    }
    let mut env = Env::start(sc, seed, &dir, clocks, progress).await?;
    let mut notes = Vec::new();
    let duration = sc.duration_s.map_or(duration, Duration::from_secs);
    match random::mix(sc.script) {
        Some(mix) => random::play(&mut env, duration, mix).await?,
        None => scenario::play(&mut env, &mut notes).await?,
    }
    finish(env, sc, seed, started, notes).await
}

async fn finish(
    mut env: Env,
    sc: &Scenario,
    seed: u64,
    started: Instant,
    notes: Vec<String>,
) -> Result<Outcome, Error> {
    env.with_nemesis(|n, t| n.settle(t))?;
    env.phase("collecting");
    let orphans = tokio::task::block_in_place(|| env.orphan_keys());
    // Every fault lifted (a scripted one may still be on), then the lock keys left behind by
    // failed or abandoned rounds and late writes must be gone within one TTL.
    env.lift_faults()?;
    let healed = Instant::now();
    let healed_ns = crate::clock::now_ns();
    env.phase("waiting for lock keys to expire");
    let orphan_lives = env.orphan_lifetime(healed).await;
    let mut parts = Vec::new();
    for c in 0..env.clients.len() {
        env.clients[c].exit().await;
    }
    for path in &env.histories {
        parts.push(history::read_jsonl::<Event>(path)?);
    }
    parts.push(env.nemesis.history.clone());
    parts.push(std::mem::take(&mut env.samples));
    let events = history::merge(parts);
    let (accesses, unfenced, fenced) = env.resource.snapshot();
    history::write_jsonl(&env.dir.join("history.jsonl"), &events)?;
    history::write_jsonl(&env.dir.join("resource.jsonl"), &accesses)?;
    let params = Params {
        epsilon_ns: ms(1),
        liveness_bound_ns: ms(sc.ttl_ms + 2000),
    };
    let report = checker::check(&events, &accesses, &unfenced, &fenced, &params);
    let broke = report.broke() || !notes.is_empty();
    let claims_observed = if report.claims.overlaps.is_empty()
        && report.claims.overstated.is_empty()
        && report.claims.overstated_extensions.is_empty()
        && report.claims.expired_unpaused.is_empty()
    {
        Expect::Hold
    } else {
        Expect::Break
    };
    let mut violations = Vec::new();
    let (observed, mut observed_text) = if sc.script == Script::Composed {
        let (observed, text, by_checker) = composed_observation(
            &report,
            &events,
            ms(sc.ttl_ms),
            sc.fenced,
            ms(sc.ttl_ms + 1500),
            sc.nodes,
        );
        violations = by_checker;
        (observed, text)
    } else if sc.fenced {
        fenced_observation(&report)
    } else if broke {
        (Expect::Break, "break".to_string())
    } else {
        (Expect::Hold, "hold".to_string())
    };
    // A composed run also owes prompt cleanup: see `orphans_outlived_cleanup`.
    let outlived_cleanup = sc.script == Script::Composed
        && orphans_outlived_cleanup(&orphan_lives, &events, healed_ns, ms(sc.ttl_ms));
    let orphan_life = overall_lifetime(&orphan_lives);
    if outlived_cleanup {
        violations.push(("orphan lifetime".to_string(), 1));
    }
    // Keys a cleanup or release left behind while the faults were on: see `leaks`.
    let leaks = leaked_keys(&events, ms(sc.ttl_ms));
    if leaks.violations() > 0 {
        violations.push(("keys left during faults".to_string(), leaks.violations()));
    }
    if sc.expect != Expect::Hold && sc.expect_claims().is_some() {
        observed_text = format!("{observed_text}, claims {claims_observed}");
    }
    let mut judgement = judge(
        sc.expect,
        observed,
        report.claims.claims,
        &env.nemesis.evidence,
        sc.minimum(),
        &pivot(sc, &events),
        ClaimsCheck {
            expected: sc.expect_claims(),
            observed: claims_observed,
        },
    );
    if judgement.verdict == Verdict::Pass
        && sc.expect == Expect::Hold
        && (!report.liveness.ok
            || orphans > 0
            || orphan_life.is_err()
            || outlived_cleanup
            || leaks.violations() > 0)
    {
        judgement.verdict = Verdict::Fail;
        let first_leak = leaks.without_expiry.iter().chain(&leaks.leaked).next();
        observed_text = format!(
            "{observed_text} (liveness {}, orphans {orphans}{}{})",
            if report.liveness.ok { "ok" } else { "FAILED" },
            first_leak.map_or(String::new(), |leak| format!(
                ", {} lock keys left during faults ({} without expiry), first: {leak}",
                leaks.violations(),
                leaks.without_expiry.len()
            )),
            match orphan_life {
                Err(left) => format!(", {left} lock keys outlived one TTL after heal"),
                Ok(lived) if outlived_cleanup => format!(
                    ", lock keys left {} ms after the clients finished, past the {} ms a cleanup needs",
                    lived.as_millis(),
                    crate::verdict::ORPHAN_GRACE.as_millis()
                ),
                Ok(_) => String::new(),
            }
        );
    }
    let orphan_lifetime_ms = orphan_life
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    if judgement.verdict == Verdict::Inconclusive {
        observed_text = format!("inconclusive: {}", judgement.why);
    }
    if leaks.reads > 0 {
        observed_text = format!(
            "{observed_text}; lock keys read {} times during the run, {} seen, {} judged",
            leaks.reads,
            leaks.keys_seen,
            leaks.keys_seen - leaks.not_judged
        );
    }
    let fenced = if sc.fenced {
        format!(
            "{} rejected, {} lost, token order violations {}",
            report.effects_fenced.rejections,
            report.lost_fenced.lost_increments,
            report.tokens.order_violations.len()
        )
    } else {
        "not used".to_string()
    };
    let outcome = Outcome {
        scenario: sc.name.to_string(),
        kind: sc.kind.to_string(),
        expected: sc.expect,
        observed: observed_text,
        verdict: judgement.verdict,
        seed,
        seconds: started.elapsed().as_secs_f64(),
        report: Some(report),
        orphan_keys: orphans,
        orphan_lifetime_ms,
        notes,
        evidence: env.nemesis.evidence.clone(),
        why: judgement.why,
        fenced,
        dir: env.dir.clone(),
        faults: env
            .nemesis
            .counts
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect(),
        violations,
    };
    std::fs::write(
        env.dir.join("results.json"),
        serde_json::to_vec_pretty(&outcome)?,
    )?;
    crate::report::write_run_html(&env.dir, sc, &outcome, &events, &accesses)?;
    Ok(outcome)
}
