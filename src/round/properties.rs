//! Properties of the quorum round over fake masters on a virtual clock: arbitrary per-node
//! delays, failures, foreign keys, cancellation at any moment, and several competing clients.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use crate::error::LockError;
use crate::round::fake::{Applied, Behaviour, FakeMaster, Fault};
use crate::round::terms::RoundTerms;
use crate::round::timing::drift;
use crate::round::{self, LockKeys, Nodes};

const KEY: &str = "quorumlock:r";

/// The keys of resource `r` without fencing or restart protection.
fn plain_keys() -> LockKeys {
    LockKeys {
        lock: Arc::from(KEY),
        fence: None,
        epoch: None,
        reentrant: None,
        blocker: None,
    }
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a test runtime: {e}"),
    }
}

pub(super) fn behaviour() -> impl Strategy<Value = Behaviour> {
    let fault = prop_oneof![
        6 => Just(Fault::None),
        1 => Just(Fault::LostAfterApply),
        1 => Just(Fault::Backlogged),
        1 => Just(Fault::Unreachable),
    ];
    (0u64..120, 0u64..120, 0u64..20, fault).prop_map(|(apply, reply, jitter, fault)| Behaviour {
        apply_after: Duration::from_millis(apply),
        reply_after: Duration::from_millis(reply),
        jitter: Duration::from_millis(jitter),
        fault,
    })
}

/// Per node: its behaviour and whether a foreign owner holds the key on it.
fn cluster() -> impl Strategy<Value = Vec<(Behaviour, bool)>> {
    prop::collection::vec((behaviour(), prop::bool::weighted(0.25)), 1..=7)
}

fn build(
    spec: &[(Behaviour, bool)],
    node_timeout: Duration,
) -> (Nodes<FakeMaster>, Vec<Arc<FakeMaster>>) {
    let fakes: Vec<Arc<FakeMaster>> = spec
        .iter()
        .enumerate()
        .map(|(i, (b, foreign))| {
            let fake = FakeMaster::new(i, node_timeout, b.clone());
            if *foreign {
                fake.preset(KEY, "foreign");
            }
            fake
        })
        .collect();
    (fakes.clone().into(), fakes)
}

/// Every `SET` of ours that took effect on a master is followed there by a compare-and-delete
/// of the same value. (The delete finds nothing if the key expired first; it can find no other
/// owner's value, since `SET NX` cannot replace a live key.)
fn every_set_cleaned_up(fakes: &[Arc<FakeMaster>]) -> Result<(), String> {
    for fake in fakes {
        let log = fake.log();
        for (i, (_, op)) in log.iter().enumerate() {
            if let Applied::Set { value, ok: true } = op {
                let deleted = log[i..].iter().any(
                    |(_, later)| matches!(later, Applied::Delete { value: v, .. } if v == value),
                );
                if !deleted {
                    return Err(format!(
                        "{} kept a key set by a failed round: {log:?}",
                        fake.name_for_tests()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Lets every background cleanup run (well past every fake delay and node timeout), then
/// checks [`every_set_cleaned_up`].
async fn settle_then_check_cleanup(fakes: &[Arc<FakeMaster>]) -> Result<(), TestCaseError> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    every_set_cleaned_up(fakes).map_err(TestCaseError::fail)
}

/// Runs one property case on a fresh paused-clock runtime.
pub(super) fn run_case(
    case: impl std::future::Future<Output = Result<(), TestCaseError>>,
) -> Result<(), TestCaseError> {
    runtime().block_on(case)
}

/// Restarts `fakes` empty at the `(ms from now, node)` instants of `restarts`, then waits for
/// the clients' `tasks`: the first error of one fails the case.
pub(super) async fn restart_then_join(
    fakes: &[Arc<FakeMaster>],
    restarts: &[(u64, usize)],
    tasks: Vec<tokio::task::JoinHandle<Result<(), String>>>,
) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let mut schedule = restarts.to_vec();
    schedule.sort();
    for (at_ms, node) in schedule {
        tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
        fakes[node % fakes.len()].restart_empty();
    }
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(TestCaseError::fail(e)),
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        }
    }
    Ok(())
}

impl FakeMaster {
    fn name_for_tests(&self) -> String {
        use crate::round::master::Master;
        self.name().to_string()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A grant has a strict majority behind it and never more validity than
    /// `ttl − elapsed − drift`; a failure leaves no key of ours anywhere once cleanup ran.
    #[test]
    fn round_grants_only_with_majority_and_cleans_up_failures(
        spec in cluster(),
        ttl_ms in 20u64..2_000,
        timeout_ms in 10u64..300,
    ) {
        run_case(async {
            let (nodes, fakes) = build(&spec, Duration::from_millis(timeout_ms));
            let terms = RoundTerms::new(Duration::from_millis(ttl_ms), 0.01);
            let key: Arc<str> = Arc::from(KEY);
            let start = Instant::now();
            let outcome = round::acquire(&nodes, "r", &plain_keys(), terms).await.map_err(|f| f.error);
            let end = Instant::now();
            prop_assert!(end - start <= Duration::from_millis(timeout_ms), "a round never outlasts the node timeout");
            match outcome {
                Ok(grant) => {
                    let holding = fakes.iter().filter(|f| f.value_of(KEY).as_deref() == Some(grant.ownership.value.as_str())).count();
                    // Counted here, not with `quorum()`, so a wrong quorum cannot hide itself.
                    prop_assert!(2 * holding > fakes.len(), "granted with {holding} of {}", fakes.len());
                    let bound = start + terms.ttl - drift(terms.ttl, terms.drift_factor);
                    prop_assert!(grant.valid_until <= bound);
                    prop_assert!(grant.valid_until > end);
                    // Release reaches every master that may hold the key, stragglers included.
                    let _ = round::release(&nodes, "r", &key, &grant.ownership, &grant.holders, true).await;
                    settle_then_check_cleanup(&fakes).await?;
                }
                Err(error) => {
                    prop_assert!(matches!(
                        error,
                        LockError::Contended { .. } | LockError::QuorumUnreachable { .. } | LockError::ValidityExhausted { .. }
                    ), "unexpected {error:?}");
                    settle_then_check_cleanup(&fakes).await?;
                }
            }
            Ok(())
        })?;
    }

    /// Dropping the acquire future at any moment leaves no key of ours behind.
    #[test]
    fn cancelled_round_leaves_no_keys(
        spec in cluster(),
        cancel_after_ms in 0u64..250,
        timeout_ms in 10u64..300,
    ) {
        run_case(async {
            let (nodes, fakes) = build(&spec, Duration::from_millis(timeout_ms));
            let terms = RoundTerms::new(Duration::from_secs(60), 0.01);
            let key: Arc<str> = Arc::from(KEY);
            let keys = plain_keys();
            let attempt = round::acquire(&nodes, "r", &keys, terms);
            if let Ok(Ok(grant)) = tokio::time::timeout(Duration::from_millis(cancel_after_ms), attempt).await {
                let _ = round::release(&nodes, "r", &key, &grant.ownership, &grant.holders, true).await;
            }
            settle_then_check_cleanup(&fakes).await?;
            Ok(())
        })?;
    }

    /// Competing clients on healthy-but-slow masters (no fault outside Redlock's model) never
    /// hold overlapping claims: each claim runs from the grant to the end of its validity or the
    /// start of its release, whichever is first.
    #[test]
    fn competing_clients_never_overlap(
        delays in prop::collection::vec((0u64..40, 0u64..40), 1..=5),
        jitter_ms in 0u64..30,
        clients in 2usize..5,
        hold_ms in prop::collection::vec(0u64..400, 8),
        ttl_ms in 100u64..600,
    ) {
        run_case(async {
            let spec: Vec<(Behaviour, bool)> = delays.iter().map(|(a, r)| (Behaviour {
                apply_after: Duration::from_millis(*a),
                reply_after: Duration::from_millis(*r),
                jitter: Duration::from_millis(jitter_ms),
                fault: Fault::None,
            }, false)).collect();
            let (_nodes, fakes) = build(&spec, Duration::from_millis(100));
            let terms = RoundTerms::new(Duration::from_millis(ttl_ms), 0.01);
            let key: Arc<str> = Arc::from(KEY);
            let claims: Arc<Mutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
            let stop = Instant::now() + Duration::from_secs(5);
            let mut tasks = Vec::new();
            for client in 0..clients {
                // Each client has its own connection to every node.
                let nodes: Nodes<FakeMaster> = fakes.iter().map(|f| f.connect(client as u64 * 1000 + 7)).collect();
                let (key, claims, hold_ms) = (key.clone(), claims.clone(), hold_ms.clone());
                tasks.push(tokio::spawn(async move {
                    let mut turn = client;
                    while Instant::now() < stop {
                        turn += 1;
                        match round::acquire(&nodes, "r", &plain_keys(), terms).await {
                            Ok(grant) => {
                                let from = Instant::now();
                                let hold = Duration::from_millis(hold_ms[turn % hold_ms.len()]);
                                tokio::time::sleep(hold).await;
                                let until = Instant::now().min(grant.valid_until);
                                claims.lock().unwrap_or_else(|p| p.into_inner()).push((client, from, until));
                                let _ = round::release(&nodes, "r", &key, &grant.ownership, &grant.holders, true).await;
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(7 * (client as u64 + 1))).await,
                        }
                    }
                }));
            }
            for task in tasks {
                prop_assert!(task.await.is_ok());
            }
            let claims = claims.lock().unwrap_or_else(|p| p.into_inner()).clone();
            prop_assert!(!claims.is_empty(), "nobody ever got the lock");
            for (i, a) in claims.iter().enumerate() {
                for b in &claims[i + 1..] {
                    if a.1 < a.2 && b.1 < b.2 {
                        prop_assert!(a.2 <= b.1 || b.2 <= a.1, "overlapping claims {a:?} and {b:?}");
                    }
                }
            }
            Ok(())
        })?;
    }
}

/// The round decides at the quorum-th grant and does not wait for a slow master.
#[test]
fn decides_without_waiting_for_stragglers() {
    runtime().block_on(async {
        let fast = Behaviour {
            apply_after: Duration::from_millis(1),
            reply_after: Duration::from_millis(1),
            jitter: Duration::ZERO,
            fault: Fault::None,
        };
        let slow = Behaviour {
            apply_after: Duration::from_secs(10),
            ..fast.clone()
        };
        let spec = vec![
            (fast.clone(), false),
            (fast.clone(), false),
            (fast, false),
            (slow.clone(), false),
            (slow, false),
        ];
        let (nodes, _fakes) = build(&spec, Duration::from_secs(30));
        let terms = RoundTerms::new(Duration::from_secs(10), 0.01);
        let start = Instant::now();
        let grant = round::acquire(&nodes, "r", &plain_keys(), terms)
            .await
            .map_err(|f| f.error);
        assert!(grant.is_ok(), "{grant:?}");
        assert!(start.elapsed() < Duration::from_millis(10));
    });
}

/// A round fails as soon as the refusals make a quorum impossible, as `Contended`.
#[test]
fn contended_fails_early() {
    runtime().block_on(async {
        let quick = Behaviour {
            apply_after: Duration::from_millis(1),
            reply_after: Duration::from_millis(1),
            jitter: Duration::ZERO,
            fault: Fault::None,
        };
        let hung = Behaviour {
            apply_after: Duration::from_secs(100),
            ..quick.clone()
        };
        let spec = vec![(quick.clone(), true), (quick, true), (hung, false)];
        let (nodes, fakes) = build(&spec, Duration::from_secs(30));
        let terms = RoundTerms::new(Duration::from_secs(10), 0.01);
        let start = Instant::now();
        let err = round::acquire(&nodes, "r", &plain_keys(), terms)
            .await
            .map_err(|f| f.error);
        assert!(
            matches!(
                err,
                Err(LockError::Contended {
                    held_elsewhere: 2,
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_millis(10));
        // The hung master's late SET gets the delete queued behind it.
        fakes[2].set_behaviour(Behaviour {
            apply_after: Duration::ZERO,
            reply_after: Duration::ZERO,
            jitter: Duration::ZERO,
            fault: Fault::None,
        });
        tokio::time::sleep(Duration::from_secs(200)).await;
        assert_eq!(every_set_cleaned_up(&fakes), Ok(()));
    });
}

/// Extend counts only with a quorum inside the validity, and never revives a lost key.
#[test]
fn extend_needs_quorum_within_validity() {
    runtime().block_on(async {
        let quick = Behaviour {
            apply_after: Duration::from_millis(1),
            reply_after: Duration::from_millis(1),
            jitter: Duration::ZERO,
            fault: Fault::None,
        };
        let spec = vec![
            (quick.clone(), false),
            (quick.clone(), false),
            (quick, false),
        ];
        let (nodes, fakes) = build(&spec, Duration::from_millis(50));
        let terms = RoundTerms::new(Duration::from_millis(300), 0.01);
        let key: Arc<str> = Arc::from(KEY);
        let grant = match round::acquire(&nodes, "r", &plain_keys(), terms).await {
            Ok(grant) => grant,
            Err(e) => panic!("{}", e.error),
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let longer = RoundTerms::new(Duration::from_secs(1), 0.01);
        let until = round::extend(
            &nodes,
            "r",
            &key,
            &grant.ownership,
            &grant.holders,
            longer,
            grant.valid_until,
        )
        .await;
        let until = match until {
            Ok(until) => until,
            Err(e) => panic!("{e}"),
        };
        assert!(until > grant.valid_until);
        // Past the new validity the keys are gone: extending must fail and not re-create them.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let late = round::extend(
            &nodes,
            "r",
            &key,
            &grant.ownership,
            &grant.holders,
            longer,
            Instant::now() + Duration::from_secs(5),
        )
        .await;
        assert!(late.as_ref().is_err_and(LockError::is_not_held), "{late:?}");
        assert!(fakes.iter().all(|f| f.value_of(KEY).is_none()));
        // And with the local validity over, nothing is even sent.
        let expired = round::extend(
            &nodes,
            "r",
            &key,
            &grant.ownership,
            &grant.holders,
            longer,
            grant.valid_until,
        )
        .await;
        assert!(expired.as_ref().is_err_and(LockError::is_not_held));
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With fencing and restart protection, competing clients on masters that crash and
    /// restart empty at arbitrary moments never hold overlapping claims, and every claim's
    /// fencing token is strictly greater than the token of every earlier claim.
    #[test]
    fn fenced_claims_are_exclusive_and_tokens_increase_across_restarts(
        delays in prop::collection::vec((1u64..30, 0u64..30, 0u64..200), 3..=5),
        jitter_ms in 0u64..20,
        clients in 2usize..4,
        restarts in prop::collection::vec((0u64..4_000, 0usize..5), 0..6),
        hold_ms in prop::collection::vec(0u64..300, 8),
        ttl_ms in 150u64..500,
        lead_ms in 0u64..3_000,
    ) {
        run_case(async {
            let spec: Vec<(Behaviour, bool)> = delays.iter().map(|(a, r, _)| (Behaviour {
                apply_after: Duration::from_millis(*a),
                reply_after: Duration::from_millis(*r),
                jitter: Duration::from_millis(jitter_ms),
                fault: Fault::None,
            }, false)).collect();
            let (_nodes, fakes) = build(&spec, Duration::from_millis(100));
            let epoch_key = "quorumlock:\u{1f}epoch";
            // Node clocks start near the client's wall clock, which proposes tokens a lead
            // ahead of it; virtual time then runs the node clocks past the proposals within the
            // case, so that both paths are taken: every master issuing the proposal (no
            // write-back needed) and masters disagreeing (the write-back keeps them ordered).
            let wall_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(0));
            let to_wall = Duration::from_micros(wall_us.saturating_sub(crate::round::fake::CLOCK_START_US));
            for (fake, (_, _, ahead_ms)) in fakes.iter().zip(&delays) {
                fake.provision(epoch_key);
                // Node clocks disagree by less than the quarantine minus the proposal cap (half
                // the quarantine), as the token construction assumes.
                fake.set_clock_ahead(to_wall + Duration::from_millis(*ahead_ms));
            }
            let keys = LockKeys {
                lock: Arc::from(KEY),
                fence: Some(Arc::from("quorumlock:\u{1f}fence:r")),
                epoch: Some(Arc::from(epoch_key)),
                reentrant: None,
                blocker: None,
            };
            let ttl = Duration::from_millis(ttl_ms);
            let mut terms = RoundTerms::new(ttl, 0.01);
            // The maximum TTL in use is `ttl`: a restarted node sits out that long plus drift, and
            // (as with a larger maximum TTL) 300 ms more, so that node clocks may disagree by up
            // to 200 ms: the half of the quarantine the proposal cap leaves.
            terms.quarantine = Some(ttl + drift(ttl, 0.01) + Duration::from_millis(300));
            terms.fence_retention = Duration::from_secs(3600);
            terms.fence_lead = Some(Duration::from_millis(lead_ms));
            let claims: Arc<Mutex<Vec<(Instant, Instant, u64)>>> = Arc::default();
            let stop = Instant::now() + Duration::from_secs(5);
            let mut tasks = Vec::new();
            for client in 0..clients {
                let nodes: Nodes<FakeMaster> = fakes.iter().map(|f| f.connect(client as u64 * 1000 + 11)).collect();
                let (keys, claims, hold_ms) = (keys.clone(), claims.clone(), hold_ms.clone());
                tasks.push(tokio::spawn(async move {
                    let mut turn = client;
                    while Instant::now() < stop {
                        turn += 1;
                        let Ok(grant) = round::acquire(&nodes, "r", &keys, terms).await else {
                            tokio::time::sleep(Duration::from_millis(5 * (client as u64 + 1))).await;
                            continue;
                        };
                        let Some(token) = grant.token else {
                            return Err("a fenced grant without a token".to_string());
                        };
                        let fence_key = keys.fence.as_deref().unwrap_or_default();
                        // As the manager does: no write-back when a quorum issued the token.
                        let raised = if grant.token_on_quorum {
                            Ok(())
                        } else {
                            crate::fencing::write_back(&nodes, "r", fence_key, token, &terms, grant.valid_until).await
                        };
                        let from = Instant::now();
                        if raised.is_ok() && from < grant.valid_until {
                            tokio::time::sleep(Duration::from_millis(hold_ms[turn % hold_ms.len()])).await;
                            let until = Instant::now().min(grant.valid_until);
                            claims.lock().unwrap_or_else(|p| p.into_inner()).push((from, until, token));
                        }
                        let _ = round::release(&nodes, "r", &keys.lock, &grant.ownership, &grant.holders, true).await;
                    }
                    Ok(())
                }));
            }
            restart_then_join(&fakes, &restarts, tasks).await?;
            let mut claims = claims.lock().unwrap_or_else(|p| p.into_inner()).clone();
            claims.sort();
            for pair in claims.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if a.0 < a.1 && b.0 < b.1 {
                    prop_assert!(a.1 <= b.0, "overlapping claims {a:?} and {b:?}");
                }
                prop_assert!(b.2 > a.2, "token went backwards: {a:?} then {b:?}");
            }
            Ok(())
        })?;
    }
}

/// Without restart protection, a master that restarts empty under a live lock lets a second
/// client in: the hazard restart protection exists for (exactly 3 of 5 hold the key).
#[test]
fn restart_without_protection_breaks_exclusion_and_protection_prevents_it() {
    for protected in [false, true] {
        runtime().block_on(async {
            let quick = Behaviour {
                apply_after: Duration::from_millis(1),
                reply_after: Duration::from_millis(1),
                jitter: Duration::ZERO,
                fault: Fault::None,
            };
            let spec: Vec<(Behaviour, bool)> = (0..5).map(|_| (quick.clone(), false)).collect();
            let (nodes, fakes) = build(&spec, Duration::from_millis(100));
            let epoch_key = "quorumlock:\u{1f}epoch";
            for fake in &fakes {
                fake.provision(epoch_key);
            }
            let keys = LockKeys {
                lock: Arc::from(KEY),
                fence: None,
                epoch: protected.then(|| Arc::from(epoch_key)),
                reentrant: None,
                blocker: None,
            };
            let ttl = Duration::from_secs(10);
            let mut terms = RoundTerms::new(ttl, 0.01);
            terms.quarantine = protected.then(|| ttl + drift(ttl, 0.01));
            // The first holder gets exactly nodes 0, 1, 2 (3 and 4 already hold a foreign key).
            fakes[3].preset(KEY, "other");
            fakes[4].preset(KEY, "other");
            let first = round::acquire(&nodes, "r", &keys, terms).await;
            assert!(first.is_ok(), "{first:?}");
            // Node 2 crashes and restarts empty; nodes 3 and 4 free up.
            fakes[2].restart_empty();
            for fake in &fakes[3..] {
                fake.restart_empty();
                fake.provision(epoch_key);
            }
            let second = round::acquire(&nodes, "r", &keys, terms).await;
            if protected {
                let Err(failure) = second else {
                    panic!("granted twice despite restart protection");
                };
                let quarantined = failure
                    .error
                    .node_errors()
                    .iter()
                    .any(|e| matches!(e.kind(), crate::NodeErrorKind::Quarantined { .. }));
                assert!(quarantined, "{:?}", failure.error);
            } else {
                assert!(second.is_ok(), "the hazard did not show: {second:?}");
            }
        });
    }
}

/// Keys granted on quarantined masters do not make the lock look free at once: a waiter told
/// so would run round after round that cannot count, until the quarantine ends.
#[test]
fn quarantined_grants_are_free_only_when_the_quarantine_ends() {
    runtime().block_on(async {
        let quick = Behaviour {
            apply_after: Duration::from_millis(1),
            reply_after: Duration::from_millis(1),
            jitter: Duration::ZERO,
            fault: Fault::None,
        };
        let spec: Vec<(Behaviour, bool)> = (0..3).map(|_| (quick.clone(), false)).collect();
        let (nodes, _fakes) = build(&spec, Duration::from_millis(100));
        let keys = LockKeys {
            lock: Arc::from(KEY),
            fence: None,
            epoch: Some(Arc::from("quorumlock:\u{1f}epoch")),
            reentrant: None,
            blocker: None,
        };
        let ttl = Duration::from_secs(10);
        let mut terms = RoundTerms::new(ttl, 0.01);
        let quarantine = ttl + drift(ttl, 0.01);
        terms.quarantine = Some(quarantine);
        // Fresh masters: every one grants, none counts.
        let Err(failure) = round::acquire_reporting(&nodes, "r", &keys, terms, true).await else {
            panic!("granted by quarantined masters");
        };
        let free_in = failure.free_in.expect("every master answered");
        assert!(
            free_in > quarantine - Duration::from_secs(1),
            "free in {free_in:?}, quarantine {quarantine:?}"
        );
    });
}
