//! Feature `metrics`: the counters, acquisition wait times and per-node latencies reach the
//! `metrics` facade under their documented names.
#![cfg(feature = "metrics")]

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use support::{cluster, patient_builder};

/// Every metric by name (and labels): counters' totals, histograms' sample counts.
type Store = Arc<Mutex<BTreeMap<String, f64>>>;

struct Entry {
    name: String,
    store: Store,
}

impl Entry {
    fn add(&self, value: f64) {
        *self
            .store
            .lock()
            .expect("store")
            .entry(self.name.clone())
            .or_default() += value;
    }
}

impl CounterFn for Entry {
    fn increment(&self, value: u64) {
        self.add(value as f64);
    }
    fn absolute(&self, _: u64) {}
}

impl HistogramFn for Entry {
    fn record(&self, _: f64) {
        self.add(1.0);
    }
}

struct Capture(Store);

impl Capture {
    fn entry(&self, key: &Key) -> Arc<Entry> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        Arc::new(Entry {
            name: format!("{}{{{}}}", key.name(), labels.join(",")),
            store: Arc::clone(&self.0),
        })
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.entry(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.entry(key))
    }
}

/// Grants, a refusal, an extension, releases and a dead master show up as metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_histograms_reach_the_facade() {
    let store = Store::default();
    metrics::set_global_recorder(Capture(Arc::clone(&store))).expect("the only recorder");

    let mut cluster = cluster(3);
    let locks = patient_builder(&cluster.urls()).build().expect("manager");
    let ttl = Duration::from_secs(10);
    let mut guard = locks.try_lock("m", ttl).await.expect("lock");
    let refused = locks.try_lock("m", ttl).await.expect_err("held");
    assert!(refused.is_contended(), "{refused}");
    guard.extend(ttl).await.expect("extend");
    guard.release().await.expect("release");

    cluster[2].kill().expect("kill");
    let dead = locks.node_names().nth(2).expect("three nodes").to_string();
    let guard = locks.try_lock("m", ttl).await.expect("two of three grant");
    guard.release().await.expect("release");
    // That grant may be decided before the dead node's error arrives (early decision), so make
    // its vote decisive once: a foreign key on node 0 leaves one yes and one no, and the round
    // must wait for node 2's error.
    cluster[0]
        .command(&["SET", "quorumlock:decisive", "foreign"])
        .expect("foreign key");
    let failed = locks.try_lock("decisive", ttl).await;
    assert!(failed.is_err(), "granted without a quorum: {failed:?}");

    let seen = store.lock().expect("store").clone();
    let get = |name: &str| seen.get(name).copied().unwrap_or(0.0);
    assert_eq!(get("quorumlock_grants_total{}"), 2.0, "{seen:#?}");
    // The decisive round (one yes, one refusal, one dead node) is contention too: the failure
    // alone leaves a quorum possible.
    assert_eq!(get("quorumlock_contended_total{}"), 2.0, "{seen:#?}");
    assert_eq!(get("quorumlock_unreachable_total{}"), 0.0, "{seen:#?}");
    assert_eq!(get("quorumlock_extensions_total{}"), 1.0, "{seen:#?}");
    assert_eq!(get("quorumlock_releases_total{}"), 2.0, "{seen:#?}");
    assert_eq!(get("quorumlock_acquire_wait_seconds{}"), 2.0, "{seen:#?}");
    assert!(
        get(&format!("quorumlock_node_errors_total{{node={dead}}}")) >= 1.0,
        "{seen:#?}"
    );
    let live = locks.node_names().next().expect("a node").to_string();
    assert!(
        get(&format!("quorumlock_node_latency_seconds{{node={live}}}")) >= 3.0,
        "{seen:#?}"
    );
}
