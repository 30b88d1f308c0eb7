//! Properties of slot claims over fake masters on a virtual clock, through the same round
//! engine as locks: arbitrary per-node delays and failures, foreign claims and completions,
//! cancellation at any moment, racing claimers under restarts, and a library mutant caught.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use crate::error::{LockError, NodeErrorKind};
use crate::keys::SlotKeys;
use crate::mutant::Mutant;
use crate::round::fake::{Behaviour, FakeMaster, Fault};
use crate::round::properties::{behaviour, restart_then_join, run_case, runtime};
use crate::round::terms::RoundTerms;
use crate::round::timing::drift;
use crate::round::Nodes;
use crate::scripts::slot_finish::{Ending, FinishArgs};
use crate::slot::round::{self as slots, ClaimSpec, Finish, RoundOutcome, SlotToClaim};
use crate::value::Ownership;

const EPOCH: &str = "quorumlock:\u{1f}epoch";

fn keys(slot: usize, fenced: bool, protected: bool) -> SlotKeys {
    SlotKeys {
        running: Arc::from(format!("quorumlock:\u{1f}slot:1:j:{slot}")),
        record: Arc::from(format!("quorumlock:\u{1f}slot-record:1:j:{slot}")),
        fence: fenced.then(|| Arc::from("quorumlock:\u{1f}fence:j")),
        epoch: protected.then(|| Arc::from(EPOCH)),
    }
}

fn to_claim(slot: usize, fenced: bool, protected: bool) -> SlotToClaim {
    SlotToClaim {
        keys: keys(slot, fenced, protected),
        resource: format!("j/{slot}"),
        ownership: Ownership::fresh(None, None),
    }
}

fn spec(terms: RoundTerms, retry_abandoned: bool) -> ClaimSpec<'static> {
    ClaimSpec {
        terms,
        retention: Duration::from_secs(60),
        runner: "test",
        retry_abandoned,
    }
}

fn quick() -> Behaviour {
    Behaviour {
        apply_after: Duration::from_millis(1),
        reply_after: Duration::from_millis(1),
        jitter: Duration::ZERO,
        fault: Fault::None,
    }
}

/// What a master holds of a slot before the round: nothing, a foreign live claim, or a
/// foreign completion.
#[derive(Debug, Clone, Copy)]
enum Before {
    Nothing,
    Claimed,
    Completed,
}

fn before() -> impl Strategy<Value = Before> {
    prop_oneof![4 => Just(Before::Nothing), 1 => Just(Before::Claimed), 1 => Just(Before::Completed)]
}

/// Per node: its behaviour, and per slot (up to 3) what it holds before the round.
fn cluster() -> impl Strategy<Value = Vec<(Behaviour, Vec<Before>)>> {
    prop::collection::vec((behaviour(), prop::collection::vec(before(), 3)), 1..=7)
}

fn build(
    spec: &[(Behaviour, Vec<Before>)],
    slots: usize,
    node_timeout: Duration,
) -> (Nodes<FakeMaster>, Vec<Arc<FakeMaster>>) {
    let fakes: Vec<Arc<FakeMaster>> = spec
        .iter()
        .enumerate()
        .map(|(i, (b, before))| {
            let fake = FakeMaster::new(i, node_timeout, b.clone());
            for (slot, held) in before.iter().enumerate().take(slots) {
                let k = keys(slot, false, false);
                match held {
                    Before::Nothing => {}
                    Before::Claimed => fake.preset(&k.running, "foreign"),
                    Before::Completed => fake.preset_completed(&k.record),
                }
            }
            fake
        })
        .collect();
    (fakes.clone().into(), fakes)
}

/// No master holds `value`'s running key, nor a record of it still running: the claim was
/// undone everywhere (or never landed).
fn nothing_left(fakes: &[Arc<FakeMaster>], slot: &SlotToClaim) -> Result<(), String> {
    let value = slot.ownership.value.as_str();
    for (i, fake) in fakes.iter().enumerate() {
        if fake.value_of(&slot.keys.running).as_deref() == Some(value) {
            return Err(format!(
                "master {i} still holds the claim of {}",
                slot.resource
            ));
        }
        if let Some((state, v)) = fake.slot_record(&slot.keys.record) {
            if v == value && state == "running" {
                return Err(format!(
                    "master {i} still records {} running",
                    slot.resource
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A slot is won only with a strict majority holding its claim and no master recording a
    /// completion it heard, never with more validity than `ttl − elapsed − drift`; every slot
    /// that did not win is undone everywhere once the undo ran.
    #[test]
    fn claims_win_only_with_a_majority_and_undo_what_did_not_win(
        spec_ in cluster(),
        count in 1usize..=3,
        ttl_ms in 20u64..2_000,
        timeout_ms in 10u64..300,
    ) {
        run_case(async {
            let (nodes, fakes) = build(&spec_, count, Duration::from_millis(timeout_ms));
            let terms = RoundTerms::new(Duration::from_millis(ttl_ms), 0.01);
            let batch: Vec<SlotToClaim> = (0..count).map(|s| to_claim(s, false, false)).collect();
            let start = Instant::now();
            let (outcomes, _undo) = slots::claim(&nodes, &batch, spec(terms, false)).await;
            let end = Instant::now();
            prop_assert_eq!(outcomes.len(), count);
            // When every master answers in time, a completion any of them recorded decides,
            // unless a quorum granted first (a real completion is on a quorum, which shares a
            // master with any granting quorum: a minority holds one here only by the test's
            // making).
            let all_answer = spec_.iter().all(|(b, _)| {
                b.fault == Fault::None
                    && b.apply_after + b.jitter + b.reply_after < Duration::from_millis(timeout_ms)
            });
            for (s, outcome) in outcomes.iter().enumerate() {
                let completed = spec_.iter().any(|(_, before)| matches!(before.get(s), Some(Before::Completed)));
                // A quorum that granted first decides, in time (won) or too late: validity
                // exhausted, only ever after a round longer than the TTL less its drift.
                let too_late = matches!(outcome, RoundOutcome::Failed(LockError::ValidityExhausted { .. }))
                    && end - start >= terms.ttl - drift(terms.ttl, terms.drift_factor);
                if all_answer && completed {
                    prop_assert!(matches!(outcome, RoundOutcome::Completed(_) | RoundOutcome::Won(_)) || too_late, "a recorded completion was not heard: {outcome:?}");
                }
            }
            prop_assert!(end - start <= Duration::from_millis(timeout_ms), "a round never outlasts the node timeout");
            for (slot, outcome) in batch.iter().zip(&outcomes) {
                match outcome {
                    RoundOutcome::Won(won) => {
                        let value = slot.ownership.value.as_str();
                        let holding = fakes.iter().filter(|f| f.value_of(&slot.keys.running).as_deref() == Some(value)).count();
                        // Counted here, not with `quorum()`, so a wrong quorum cannot hide itself.
                        prop_assert!(2 * holding > fakes.len(), "won with {holding} of {}", fakes.len());
                        let bound = start + terms.ttl - drift(terms.ttl, terms.drift_factor);
                        prop_assert!(won.valid_until <= bound && won.valid_until > end);
                    }
                    RoundOutcome::Completed(_) => {
                        let completed = fakes.iter().any(|f| f.slot_record(&slot.keys.record).is_some_and(|(s, _)| s == "completed"));
                        prop_assert!(completed, "completed on no master");
                    }
                    RoundOutcome::Running(_) | RoundOutcome::Split(_) => {
                        let foreign = fakes.iter().any(|f| f.value_of(&slot.keys.running).as_deref() == Some("foreign"));
                        prop_assert!(foreign, "{outcome:?} without a foreign claim");
                    }
                    RoundOutcome::Abandoned(_) => prop_assert!(false, "no slot was abandoned: {outcome:?}"),
                    RoundOutcome::Failed(error) => prop_assert!(matches!(
                        error,
                        LockError::QuorumUnreachable { .. } | LockError::ValidityExhausted { .. }
                    ), "unexpected {error:?}"),
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            for (slot, outcome) in batch.iter().zip(&outcomes) {
                if !matches!(outcome, RoundOutcome::Won(_)) {
                    nothing_left(&fakes, slot).map_err(TestCaseError::fail)?;
                }
            }
            Ok(())
        })?;
    }

    /// Dropping a claim's future at any moment leaves no claim of it behind.
    #[test]
    fn a_cancelled_claim_leaves_nothing(
        spec_ in cluster(),
        count in 1usize..=3,
        cancel_after_ms in 0u64..250,
        timeout_ms in 10u64..300,
    ) {
        run_case(async {
            let (nodes, fakes) = build(&spec_, count, Duration::from_millis(timeout_ms));
            let terms = RoundTerms::new(Duration::from_secs(60), 0.01);
            let batch: Vec<SlotToClaim> = (0..count).map(|s| to_claim(s, false, false)).collect();
            let ownership = slots::claim(&nodes, &batch, spec(terms, false));
            if let Ok((outcomes, _)) = tokio::time::timeout(Duration::from_millis(cancel_after_ms), ownership).await {
                // Decided before the cancellation: undo the wins as an abandoned hand-over does.
                for (slot, outcome) in batch.iter().zip(outcomes) {
                    if let RoundOutcome::Won(won) = outcome {
                        slots::undo_claim_in_background(&nodes, &slot.keys.running, &slot.keys, &won.ownership.value, &won.holders.may_hold);
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            for slot in &batch {
                nothing_left(&fakes, slot).map_err(TestCaseError::fail)?;
            }
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Racing claimers under fencing and restart protection, on masters that crash and restart
    /// empty at arbitrary moments: each slot is won by one claimer at most (the winner records
    /// its completion), and every win's token is above every earlier win's.
    #[test]
    fn racing_claimers_run_each_slot_once_across_restarts(
        delays in prop::collection::vec((1u64..30, 0u64..30), 3..=5),
        jitter_ms in 0u64..20,
        clients in 2usize..4,
        restarts in prop::collection::vec((0u64..4_000, 0usize..5), 0..6),
        ttl_ms in 150u64..500,
    ) {
        run_case(async {
            let behaviours: Vec<(Behaviour, Vec<Before>)> = delays.iter().map(|(a, r)| (Behaviour {
                apply_after: Duration::from_millis(*a),
                reply_after: Duration::from_millis(*r),
                jitter: Duration::from_millis(jitter_ms),
                fault: Fault::None,
            }, Vec::new())).collect();
            let (_nodes, fakes) = build(&behaviours, 0, Duration::from_millis(100));
            for fake in &fakes {
                fake.provision(EPOCH);
            }
            let ttl = Duration::from_millis(ttl_ms);
            let mut terms = RoundTerms::new(ttl, 0.01);
            // A restarted master sits out longer than any claim and record it may have lost
            // could matter: the records are kept 60 s, so is the quarantine.
            terms.quarantine = Some(Duration::from_secs(60));
            terms.fence_retention = Duration::from_secs(3600);
            let wins: Arc<Mutex<Vec<(usize, Instant, u64)>>> = Arc::default();
            let stop = Instant::now() + Duration::from_secs(5);
            let mut tasks = Vec::new();
            for client in 0..clients {
                let nodes: Nodes<FakeMaster> = fakes.iter().map(|f| f.connect(client as u64 * 1000 + 13)).collect();
                let wins = Arc::clone(&wins);
                tasks.push(tokio::spawn(async move {
                    // A new slot every 400 ms; every client claims each one until it is decided.
                    while Instant::now() < stop {
                        let slot = usize::try_from((Instant::now() - (stop - Duration::from_secs(5))).as_millis() / 400).unwrap_or(0);
                        let one = to_claim(slot, true, true);
                        let (outcome, _) = slots::claim_one(&nodes, one, spec(terms, true)).await;
                        if let RoundOutcome::Won(won) = outcome {
                            let Some(token) = won.token else {
                                return Err("a fenced win without a token".to_string());
                            };
                            wins.lock().unwrap_or_else(|p| p.into_inner()).push((slot, Instant::now(), token));
                            let k = keys(slot, true, true);
                            let ending = Finish {
                                resource: "j",
                                args: FinishArgs {
                                    keys: k,
                                    value: won.ownership.value.as_str().to_string(),
                                    runner: "test".into(),
                                    retention: Duration::from_secs(60),
                                    token: Some(token),
                                    attempt: won.attempt,
                                    release: true,
                                },
                            };
                            let _ = slots::finish(&nodes, Ending::Completed, &[ending]).await;
                        }
                        tokio::time::sleep(Duration::from_millis(3 * (client as u64 + 1))).await;
                    }
                    Ok(())
                }));
            }
            restart_then_join(&fakes, &restarts, tasks).await?;
            let mut wins = wins.lock().unwrap_or_else(|p| p.into_inner()).clone();
            prop_assert!(!wins.is_empty(), "no slot was ever claimed");
            wins.sort_by_key(|w| w.1);
            for (i, a) in wins.iter().enumerate() {
                for b in &wins[i + 1..] {
                    prop_assert!(a.0 != b.0, "slot {} won twice: {a:?} and {b:?}", a.0);
                    prop_assert!(b.2 > a.2, "token went backwards: {a:?} then {b:?}");
                }
            }
            Ok(())
        })?;
    }
}

/// A slot completed on a bare quorum (0, 1, 2 of 5), then master 2 restarts empty and the
/// masters that remember the completion (0 and 1) cannot be reached: the second claimer hears
/// only 2, 3 and 4. Restart protection refuses it (master 2's grant does not count); with the
/// `QuarantineIgnored` mutant the slot runs twice.
#[test]
fn a_restarted_master_cannot_make_a_completed_slot_run_again_unless_the_quarantine_is_ignored() {
    for mutant in [false, true] {
        runtime().block_on(async {
            let healthy: Vec<(Behaviour, Vec<Before>)> = (0..5).map(|_| (quick(), Vec::new())).collect();
            let (nodes, fakes) = build(&healthy, 0, Duration::from_millis(100));
            for fake in &fakes {
                fake.provision(EPOCH);
            }
            let ttl = Duration::from_secs(10);
            let mut terms = RoundTerms::new(ttl, 0.01);
            terms.quarantine = Some(ttl + drift(ttl, 0.01));
            terms.mutant = mutant.then_some(Mutant::QuarantineIgnored);
            let unreachable = Behaviour {
                fault: Fault::Unreachable,
                ..quick()
            };
            // The first run: claimed and completed on masters 0, 1, 2 only.
            for fake in &fakes[3..] {
                fake.set_behaviour(unreachable.clone());
            }
            let first = to_claim(0, false, true);
            let (outcome, _) = slots::claim_one(&nodes, first, spec(terms, false)).await;
            let RoundOutcome::Won(won) = outcome else {
                panic!("the first claim did not win: {outcome:?}");
            };
            let ending = Finish {
                resource: "j/0",
                args: FinishArgs {
                    keys: keys(0, false, true),
                    value: won.ownership.value.as_str().to_string(),
                    runner: "first".into(),
                    retention: Duration::from_secs(60),
                    token: None,
                    attempt: won.attempt,
                    release: true,
                },
            };
            let recorded = slots::finish(&nodes, Ending::Completed, &[ending]).await;
            assert!(matches!(recorded[..], [Ok(())]), "{recorded:?}");
            // Master 2 restarts empty; 3 and 4 come back (provisioned); 0 and 1 are cut off.
            fakes[2].restart_empty();
            for fake in &fakes[3..] {
                fake.set_behaviour(quick());
            }
            for fake in &fakes[..2] {
                fake.set_behaviour(unreachable.clone());
            }
            let second = to_claim(0, false, true);
            let (outcome, _) = slots::claim_one(&nodes, second, spec(terms, false)).await;
            if mutant {
                assert!(matches!(outcome, RoundOutcome::Won(_)), "the mutant was not caught: {outcome:?}");
            } else {
                let RoundOutcome::Failed(error) = outcome else {
                    panic!("a completed slot was claimed again despite restart protection: {outcome:?}");
                };
                let quarantined = error
                    .node_errors()
                    .iter()
                    .any(|e| matches!(e.kind(), NodeErrorKind::Quarantined { .. }));
                assert!(quarantined, "{error:?}");
            }
        });
    }
}
