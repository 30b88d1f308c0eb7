//! Many clients in three separate managers contend for one resource on real masters: no two are
//! ever inside the critical section at once.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockError, Redlock};
use quorumlock_testkit::RedisCluster;
use support::{builder, cluster, total_keys, wait_until, PATIENCE};

const MANAGERS: usize = 3;
const TASKS_PER_MANAGER: usize = 32;
const HAMMER_FOR: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(2);
const RESOURCE: &str = "the-one-resource";

/// 96 tasks in 3 managers over 5 masters hammer one resource for 3 s: never two holders inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_are_ever_inside_at_once() {
    let cluster = cluster(5);
    let hammer = Hammer::start(&cluster);
    let counters = hammer.finish().await;
    counters.assert_exclusive_and_busy();
    wait_until("every released key is gone", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// The same while one master pauses for a second and resumes with a backlog of late requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_holders_while_a_master_pauses_and_resumes() {
    let mut cluster = cluster(5);
    let hammer = Hammer::start(&cluster);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster[4].pause().expect("pause");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster[4].resume().expect("resume");
    let counters = hammer.finish().await;
    counters.assert_exclusive_and_busy();
    wait_until("every released key is gone", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

#[derive(Default)]
struct Counters {
    grants: AtomicU64,
    violations: AtomicU64,
    contended: AtomicU64,
    other_retryable: AtomicU64,
    release_failures: AtomicU64,
}

impl Counters {
    fn assert_exclusive_and_busy(&self) {
        let grants = self.grants.load(Ordering::SeqCst);
        println!(
            "grants {grants}, contended {}, other retryable {}, release failures {}",
            self.contended.load(Ordering::SeqCst),
            self.other_retryable.load(Ordering::SeqCst),
            self.release_failures.load(Ordering::SeqCst),
        );
        assert_eq!(
            self.violations.load(Ordering::SeqCst),
            0,
            "two holders were inside the critical section at once"
        );
        assert!(
            grants >= 10,
            "only {grants} grants in {HAMMER_FOR:?}: the test proves nothing"
        );
    }
}

/// The contending tasks, running until [`HAMMER_FOR`] has passed.
struct Hammer {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl Hammer {
    fn start(cluster: &RedisCluster) -> Self {
        let urls = cluster.urls();
        // The default retry delay (random, below 200 ms): with 96 contenders and a delay of
        // 20 ms, split votes and the keys of failed rounds starve almost every round.
        let managers: Vec<Redlock> = (0..MANAGERS)
            .map(|_| builder(&urls).build().expect("build manager"))
            .collect();
        let inside = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let stop_at = Instant::now() + HAMMER_FOR;
        let mut tasks = Vec::new();
        for locks in &managers {
            for _ in 0..TASKS_PER_MANAGER {
                tasks.push(tokio::spawn(contend(
                    locks.clone(),
                    Arc::clone(&inside),
                    Arc::clone(&counters),
                    stop_at,
                )));
            }
        }
        Self { tasks, counters }
    }

    async fn finish(self) -> Arc<Counters> {
        for task in self.tasks {
            task.await.expect("task panicked");
        }
        self.counters
    }
}

/// Acquires, enters the critical section (checking that nobody else is inside), leaves,
/// releases; again and again until `stop_at`.
async fn contend(
    locks: Redlock,
    inside: Arc<AtomicBool>,
    counters: Arc<Counters>,
    stop_at: Instant,
) {
    while Instant::now() < stop_at {
        let wait = (Instant::now() + Duration::from_millis(500)).min(stop_at);
        let guard = match locks.lock_until(RESOURCE, TTL, wait).await {
            Ok(guard) => guard,
            Err(e) if e.is_contended() => {
                counters.contended.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // Under load a master may miss the node timeout; that is no violation.
            Err(e) if e.is_retryable() || deadline_without_attempt(&e) => {
                counters.other_retryable.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => panic!("unexpected error: {e}"),
        };
        if !guard.is_valid() {
            continue;
        }
        if inside.swap(true, Ordering::SeqCst) {
            counters.violations.fetch_add(1, Ordering::SeqCst);
        }
        counters.grants.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
        assert!(
            guard.is_valid(),
            "the critical section outlived the validity"
        );
        inside.store(false, Ordering::SeqCst);
        if let Err(e) = guard.release().await {
            assert!(e.is_retryable(), "release failed: {e}");
            counters.release_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `lock_until` called right at the end of the run may find its deadline already passed.
fn deadline_without_attempt(error: &LockError) -> bool {
    matches!(error, LockError::DeadlinePassed { last: None, .. })
}
