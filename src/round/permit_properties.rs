//! Properties of counting semaphores and read-write locks over fake masters on a virtual clock:
//! never more than K holders of a K-permit semaphore; never a writer beside a reader, never two
//! writers, never more than R readers. For every count of N ≤ 5 masters, K ≤ 4 permits and
//! R ≤ 4 readers, under random interleavings of acquire, extend, release, expiry (holders that
//! crash and leave their keys) and master failures (unreachable or paused for a while, or
//! restarted without data under restart protection).
//!
//! The keys are the library's own ([`Permits`], [`writing`]: names, the reader's blocker, the
//! writer's set of every read permit, the mutants), the permits are walked by the library's own
//! [`first_granted`], and every round is the engine's; the fake masters model the scripts'
//! decisions ([`FakeMaster`] the acquire script's blocker, [`FakeSet`] the key-set scripts). What
//! the test writes itself is the writer's order of steps (intent, then the set, then the intent
//! released), which decides who waits, never who holds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use crate::config::Config;
use crate::mutant::Mutant;
use crate::round::fake::{Behaviour, FakeMaster, FakeSet, Fault};
use crate::round::master::Master;
use crate::round::properties::{run_case, runtime};
use crate::round::terms::RoundTerms;
use crate::round::timing::drift;
use crate::round::{self, Grant, LockKeys, Nodes};
use crate::rwlock::{read_permits, writing, Writing};
use crate::semaphore::{first_granted, Permits};

const NODE_TIMEOUT: Duration = Duration::from_millis(60);
/// How long each case's clients go on, in virtual time.
const RUN: Duration = Duration::from_secs(4);

/// A client's settings with restart protection, and `mutant` if any.
fn config(mutant: Option<Mutant>) -> Config {
    let builder = crate::RedlockBuilder::default()
        .nodes(["redis://127.0.0.1:1"])
        .restart_protection(true)
        .max_ttl(Duration::from_secs(1));
    let Ok((mut config, _)) = builder.validate() else {
        panic!("the test's settings are valid");
    };
    config.mutant = mutant;
    config
}

/// The terms of every round: `ttl`, and a restarted master sits out the TTL plus drift, plus
/// a margin (as with a larger maximum TTL).
fn terms(ttl: Duration) -> RoundTerms {
    let mut terms = RoundTerms::new(ttl, 0.01);
    terms.quarantine = Some(ttl + drift(ttl, 0.01) + Duration::from_millis(50));
    terms
}

/// How a holder's hold ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Release,
    /// Extends half-way through, then releases.
    Extend,
    /// Never releases: its keys expire.
    Crash,
}

/// A master failure: unreachable or paused (requests applied late) for a while, or a restart
/// that loses every key.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Down(u64),
    Pause(u64),
    Restart,
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![3 => Just(End::Release), 1 => Just(End::Extend), 1 => Just(End::Crash)]
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        (50u64..600).prop_map(Failure::Down),
        (50u64..400).prop_map(Failure::Pause),
        Just(Failure::Restart),
    ]
}

/// Failures at `(ms from the start, node, failure)`.
fn failures() -> impl Strategy<Value = Vec<(u64, usize, Failure)>> {
    prop::collection::vec((0u64..3_500, 0usize..5, failure()), 0..5)
}

/// `n` fake masters, each with one connection per client.
struct Cluster {
    fakes: Vec<Arc<FakeMaster>>,
    /// Per master: its behaviour when healthy, and every client's connection to it.
    links: Vec<(Behaviour, Vec<Arc<FakeMaster>>)>,
}

impl Cluster {
    /// Masters with `(apply, reply)` delays in ms, each provisioned (an old epoch marker).
    fn new(delays: &[(u64, u64)], jitter_ms: u64, clients: usize, epoch: &str) -> Self {
        let mut fakes = Vec::new();
        let mut links = Vec::new();
        for (i, (apply, reply)) in delays.iter().enumerate() {
            let healthy = Behaviour {
                apply_after: Duration::from_millis(*apply),
                reply_after: Duration::from_millis(*reply),
                jitter: Duration::from_millis(jitter_ms),
                fault: Fault::None,
            };
            let fake = FakeMaster::new(i, NODE_TIMEOUT, healthy.clone());
            fake.provision(epoch);
            let connections = (0..clients)
                .map(|c| fake.connect(c as u64 * 1000 + i as u64 + 3))
                .collect();
            links.push((healthy, connections));
            fakes.push(fake);
        }
        Self { fakes, links }
    }

    /// Client `c`'s connections to every master.
    fn nodes(&self, c: usize) -> Nodes<FakeMaster> {
        self.links.iter().map(|(_, l)| Arc::clone(&l[c])).collect()
    }

    /// Client `c`'s connections, each presenting `writing`'s set as one key.
    fn set_nodes(&self, c: usize, writing: &Writing) -> Nodes<FakeSet> {
        let set = &writing.set;
        self.links
            .iter()
            .map(|(_, l)| FakeSet::over(&l[c], set))
            .collect()
    }

    fn behave(&self, node: usize, behaviour: &Behaviour) {
        for link in &self.links[node].1 {
            link.set_behaviour(behaviour.clone());
        }
    }

    /// Injects `failures` at their instants from now (a node index wraps around).
    async fn fail(self: Arc<Self>, failures: Vec<(u64, usize, Failure)>) {
        let start = Instant::now();
        let mut schedule = failures;
        schedule.sort_by_key(|f| f.0);
        let n = self.fakes.len();
        for (at_ms, node, failure) in schedule {
            tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
            let node = node % n;
            let healthy = self.links[node].0.clone();
            let (faulty, lasts) = match failure {
                Failure::Restart => {
                    self.fakes[node].restart_empty();
                    continue;
                }
                Failure::Down(ms) => (
                    Behaviour {
                        fault: Fault::Unreachable,
                        ..healthy.clone()
                    },
                    ms,
                ),
                Failure::Pause(ms) => (
                    Behaviour {
                        apply_after: healthy.apply_after + Duration::from_millis(ms),
                        ..healthy.clone()
                    },
                    ms,
                ),
            };
            self.behave(node, &faulty);
            let cluster = Arc::clone(&self);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(lasts)).await;
                cluster.behave(node, &healthy);
            });
        }
    }
}

/// Holds `grant` of `key` for `hold`, then ends as `end` says: the claim, from the grant to the
/// end of its validity or the start of its release, whichever is first.
async fn hold<M: Master>(
    nodes: &Nodes<M>,
    key: &Arc<str>,
    grant: Grant,
    end: End,
    hold: Duration,
    terms: RoundTerms,
) -> (Instant, Instant) {
    let from = Instant::now();
    let mut valid_until = grant.valid_until;
    if end == End::Extend {
        tokio::time::sleep(hold / 2).await;
        let extended = round::extend(
            nodes,
            "p",
            key,
            &grant.ownership,
            &grant.holders,
            terms,
            valid_until,
        )
        .await;
        if let Ok(until) = extended {
            valid_until = until;
        }
        tokio::time::sleep(hold / 2).await;
    } else {
        tokio::time::sleep(hold).await;
    }
    if end == End::Crash {
        // The holder is gone; its keys expire. It comes back once its validity has run out.
        tokio::time::sleep_until(valid_until).await;
        return (from, valid_until);
    }
    let until = Instant::now().min(valid_until);
    let _ = round::release(nodes, "p", key, &grant.ownership, &grant.holders, true).await;
    (from, until)
}

/// One of `permits`, walked as the library walks them: the index and the grant.
async fn any_permit(
    nodes: &Nodes<FakeMaster>,
    permits: &[LockKeys],
    terms: RoundTerms,
) -> Option<(usize, Grant)> {
    first_granted(permits.len(), NODE_TIMEOUT, |i| async move {
        round::acquire(nodes, "p", &permits[i], terms)
            .await
            .map(|grant| (i, grant))
    })
    .await
    .ok()
}

/// A writer: the intent, then every read permit at once while the intent lasts, then the
/// intent released. The set's grant, if any.
async fn write(
    nodes: &Nodes<FakeMaster>,
    set_nodes: &Nodes<FakeSet>,
    writing: &Writing,
    terms: RoundTerms,
) -> Option<Grant> {
    let intent = round::acquire(nodes, "w", &writing.intent, terms)
        .await
        .ok()?;
    let keys = writing.set.round_keys();
    let mut granted = None;
    while granted.is_none() && Instant::now() < intent.valid_until {
        match round::acquire(set_nodes, "w", &keys, terms).await {
            Ok(grant) => granted = Some(grant),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    let lock = &writing.intent.lock;
    let _ = round::release(nodes, "w", lock, &intent.ownership, &intent.holders, true).await;
    granted
}

/// The most claims that overlap at one instant (claims are `[from, until)`; empty ones count
/// for nothing).
fn most_at_once(claims: &[(Instant, Instant)]) -> usize {
    let mut edges: Vec<(Instant, i32)> = claims
        .iter()
        .filter(|(from, until)| from < until)
        .flat_map(|&(from, until)| [(from, 1), (until, -1)])
        .collect();
    // At the same instant an end comes before a start: `[a, b)` and `[b, c)` do not overlap.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Never more than `k` of `claims` at once.
fn at_most(claims: &[(Instant, Instant)], k: usize, what: &str) -> Result<(), String> {
    match most_at_once(claims) {
        most if most > k => Err(format!("{most} {what} at once, at most {k} allowed")),
        _ => Ok(()),
    }
}

/// A semaphore's clients: each acquires a permit, holds it and ends as its steps say, until
/// the run is over. Every claim.
async fn semaphore_run(
    cluster: Arc<Cluster>,
    permits: Permits,
    clients: usize,
    steps: Vec<(End, u64)>,
    failures: Vec<(u64, usize, Failure)>,
) -> Vec<(Instant, Instant)> {
    let stop = Instant::now() + RUN;
    let claims: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let permits = Arc::new(permits);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let nodes = cluster.nodes(c);
        let (permits, claims, steps) = (Arc::clone(&permits), Arc::clone(&claims), steps.clone());
        tasks.push(tokio::spawn(async move {
            let mut turn = c;
            while Instant::now() < stop {
                turn += 1;
                let (end, hold_ms) = steps[turn % steps.len()];
                let terms = permits.terms;
                let Some((i, grant)) = any_permit(&nodes, &permits.keys, terms).await else {
                    tokio::time::sleep(Duration::from_millis(5 * (c as u64 + 1))).await;
                    continue;
                };
                let key = &permits.keys[i].lock;
                let held = Duration::from_millis(hold_ms);
                let claim = hold(&nodes, key, grant, end, held, terms).await;
                claims.lock().unwrap_or_else(|p| p.into_inner()).push(claim);
            }
        }));
    }
    Arc::clone(&cluster).fail(failures).await;
    for task in tasks {
        let _ = task.await;
    }
    let claims = claims.lock().unwrap_or_else(|p| p.into_inner()).clone();
    claims
}

/// A read-write lock's clients: each, step by step, reads or writes, holds and ends as its
/// steps say. The readers' claims and the writers'.
async fn rw_run(
    cluster: Arc<Cluster>,
    readers: Permits,
    writer: Writing,
    clients: usize,
    steps: Vec<(bool, End, u64)>,
    failures: Vec<(u64, usize, Failure)>,
) -> (Vec<(Instant, Instant)>, Vec<(Instant, Instant)>) {
    let stop = Instant::now() + RUN;
    type Claims = Arc<Mutex<Vec<(bool, (Instant, Instant))>>>;
    let claims: Claims = Arc::default();
    let (readers, writer) = (Arc::new(readers), Arc::new(writer));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let nodes = cluster.nodes(c);
        let set_nodes = cluster.set_nodes(c, &writer);
        let (readers, writer) = (Arc::clone(&readers), Arc::clone(&writer));
        let (claims, steps) = (Arc::clone(&claims), steps.clone());
        tasks.push(tokio::spawn(async move {
            let mut turn = c;
            let terms = writer.terms;
            while Instant::now() < stop {
                turn += 1;
                let (writes, end, hold_ms) = steps[turn % steps.len()];
                let held = Duration::from_millis(hold_ms);
                let claim = if writes {
                    match write(&nodes, &set_nodes, &writer, terms).await {
                        Some(grant) => {
                            let keys = writer.set.round_keys();
                            Some(hold(&set_nodes, &keys.lock, grant, end, held, terms).await)
                        }
                        None => None,
                    }
                } else {
                    match any_permit(&nodes, &readers.keys, terms).await {
                        Some((i, grant)) => {
                            let key = &readers.keys[i].lock;
                            Some(hold(&nodes, key, grant, end, held, terms).await)
                        }
                        None => None,
                    }
                };
                match claim {
                    Some(claim) => claims
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((writes, claim)),
                    None => tokio::time::sleep(Duration::from_millis(5 * (c as u64 + 1))).await,
                }
            }
        }));
    }
    Arc::clone(&cluster).fail(failures).await;
    for task in tasks {
        let _ = task.await;
    }
    let claims = claims.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let of = |writes: bool| {
        claims
            .iter()
            .filter(|(w, _)| *w == writes)
            .map(|(_, claim)| *claim)
            .collect::<Vec<_>>()
    };
    (of(false), of(true))
}

/// No writer beside a reader or another writer, never more than `r` readers.
fn exclusive(
    readers: &[(Instant, Instant)],
    writers: &[(Instant, Instant)],
    r: usize,
) -> Result<(), String> {
    at_most(readers, r, "readers")?;
    at_most(writers, 1, "writers")?;
    for w in writers.iter().filter(|(from, until)| from < until) {
        for reader in readers.iter().filter(|(from, until)| from < until) {
            if w.0 < reader.1 && reader.0 < w.1 {
                return Err(format!("a writer {w:?} beside a reader {reader:?}"));
            }
        }
    }
    Ok(())
}

/// One case: the masters' `(apply, reply)` delays in ms and jitter, the permit (or reader)
/// count, the clients, the TTL, the failures, and the mutant if any.
struct Case {
    mutant: Option<Mutant>,
    delays: Vec<(u64, u64)>,
    jitter_ms: u64,
    count: usize,
    clients: usize,
    ttl: Duration,
    failures: Vec<(u64, usize, Failure)>,
}

impl Case {
    fn cluster(&self, config: &Config) -> Arc<Cluster> {
        let epoch = crate::keys::epoch_key(config);
        Arc::new(Cluster::new(
            &self.delays,
            self.jitter_ms,
            self.clients,
            &epoch,
        ))
    }

    /// A semaphore of `count` permits: its claims.
    async fn semaphore(self, steps: Vec<(End, u64)>) -> Vec<(Instant, Instant)> {
        let config = config(self.mutant);
        let of = crate::keys::PermitOf::Semaphore;
        let Ok(mut permits) = Permits::new(&config, of, "s", self.count, self.ttl, None) else {
            panic!("valid permits");
        };
        permits.terms = terms(self.ttl);
        let cluster = self.cluster(&config);
        semaphore_run(cluster, permits, self.clients, steps, self.failures).await
    }

    /// A read-write lock admitting `count` readers: its readers' and writers' claims.
    async fn rw(
        self,
        steps: Vec<(bool, End, u64)>,
    ) -> (Vec<(Instant, Instant)>, Vec<(Instant, Instant)>) {
        let config = config(self.mutant);
        let readers = read_permits(&config, "rw", self.count, self.ttl);
        let writer = writing(&config, "rw", self.count, self.ttl);
        let (Ok(mut readers), Ok(mut writer)) = (readers, writer) else {
            panic!("valid read permits and writer keys");
        };
        readers.terms = terms(self.ttl);
        writer.terms = terms(self.ttl);
        let cluster = self.cluster(&config);
        rw_run(cluster, readers, writer, self.clients, steps, self.failures).await
    }
}

fn delays() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..30, 0u64..30), 1..=5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Never more than K holders of a K-permit semaphore, on 1 to 5 masters, whatever the
    /// holders do and the masters suffer.
    #[test]
    fn a_semaphore_never_has_more_than_k_holders(
        delays in delays(),
        jitter_ms in 0u64..10,
        k in 1usize..=4,
        extra in 1usize..=3,
        ttl_ms in 100u64..400,
        steps in prop::collection::vec((end(), 0u64..300), 6),
        failures in failures(),
    ) {
        run_case(async {
            let quiet = failures.is_empty();
            let ttl = Duration::from_millis(ttl_ms);
            let clients = k + extra;
            let case = Case { mutant: None, delays, jitter_ms, count: k, clients, ttl, failures };
            let claims = case.semaphore(steps).await;
            at_most(&claims, k, "holders").map_err(TestCaseError::fail)?;
            prop_assert!(!quiet || !claims.is_empty(), "nobody ever got a permit");
            Ok(())
        })?;
    }

    /// Never a writer beside a reader, never two writers, never more than R readers, on 1 to 5
    /// masters, whatever the holders do and the masters suffer.
    #[test]
    fn a_writer_is_never_beside_a_reader(
        delays in delays(),
        jitter_ms in 0u64..10,
        r in 1usize..=4,
        clients in 2usize..=5,
        ttl_ms in 100u64..400,
        steps in prop::collection::vec((prop::bool::weighted(0.3), end(), 0u64..300), 6),
        failures in failures(),
    ) {
        run_case(async {
            let quiet = failures.is_empty();
            let ttl = Duration::from_millis(ttl_ms);
            let case = Case { mutant: None, delays, jitter_ms, count: r, clients, ttl, failures };
            let (readers, writers) = case.rw(steps).await;
            exclusive(&readers, &writers, r).map_err(TestCaseError::fail)?;
            prop_assert!(!quiet || readers.len() + writers.len() > 0, "nobody ever held");
            Ok(())
        })?;
    }
}

/// Every count: N = 1 to 5 masters with K = 1 to 4 permits (and R = 1 to 4 readers), each
/// once, with holders that release, extend and crash, a master that restarts and one that is
/// down for a while.
#[test]
fn every_count_of_masters_and_permits_keeps_its_bound() {
    let steps = vec![
        (End::Release, 120),
        (End::Crash, 40),
        (End::Extend, 200),
        (End::Release, 0),
    ];
    let rw_steps: Vec<_> = (steps.iter().enumerate())
        .map(|(i, &(end, hold))| (i % 3 == 0, end, hold))
        .collect();
    for n in 1..=5u64 {
        for k in 1..=4usize {
            let case = || Case {
                mutant: None,
                delays: (0..n).map(|i| (1 + 3 * i, 2 + i)).collect(),
                jitter_ms: 3,
                count: k,
                clients: k + 2,
                ttl: Duration::from_millis(200),
                failures: vec![(700, 1, Failure::Restart), (1500, 0, Failure::Down(400))],
            };
            let claims = runtime().block_on(case().semaphore(steps.clone()));
            assert_eq!(at_most(&claims, k, "holders"), Ok(()), "n={n} k={k}");
            assert!(!claims.is_empty(), "n={n} k={k}: nobody ever got a permit");
            let (readers, writers) = runtime().block_on(case().rw(rw_steps.clone()));
            assert_eq!(exclusive(&readers, &writers, k), Ok(()), "n={n} r={k}");
            assert!(!readers.is_empty(), "n={n} r={k}: nobody ever read");
            assert!(!writers.is_empty(), "n={n} r={k}: nobody ever wrote");
        }
    }
}

/// The checks catch the broken constructions: a semaphore client with a permit too many lets
/// K + 1 hold (as a counter per master on majorities does), and a writer that locks only some
/// read permits holds beside a reader of another.
#[test]
fn the_broken_constructions_are_caught() {
    let case = |mutant, count, clients| Case {
        mutant: Some(mutant),
        delays: vec![(1, 1), (2, 1), (3, 2)],
        jitter_ms: 0,
        count,
        clients,
        ttl: Duration::from_millis(300),
        failures: Vec::new(),
    };
    // Long holds: every client that can hold at once does.
    let steps = vec![(End::Release, 250)];
    let claims = runtime().block_on(case(Mutant::SemaphoreExtraPermit, 2, 3).semaphore(steps));
    assert!(at_most(&claims, 2, "holders").is_err(), "K + 1 never held");
    // Readers hold long and writers come often: with R = 2 the broken writer locks permit 0
    // only, so it is granted while a reader holds permit 1.
    let steps = vec![(false, End::Release, 250), (true, End::Release, 50)];
    let (readers, writers) = runtime().block_on(case(Mutant::ReaderMissesWriter, 2, 4).rw(steps));
    assert!(
        exclusive(&readers, &writers, 2).is_err(),
        "no writer beside a reader: {} readers, {} writers",
        readers.len(),
        writers.len()
    );
}
