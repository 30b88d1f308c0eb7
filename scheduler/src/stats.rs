//! [`JobStats`]: a job's counters on this worker, readable through the API, and (with the
//! `metrics` feature) reported to the `metrics` facade as
//! `quorumlock_scheduler_slots_total{job, outcome}` and the histogram
//! `quorumlock_scheduler_lateness_seconds{job}`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::percentile::nearest_rank;

/// How many recent lateness samples the percentiles are computed over.
const LATENESS_SAMPLES: usize = 1024;

/// A snapshot of one job's counters on this worker. Each counts slots, and only grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStats {
    /// Slots this worker claimed and started (retries included).
    pub runs: u64,
    /// Runs whose function returned `Ok`.
    pub succeeded: u64,
    /// Runs whose function returned an error or panicked (the slot is recorded as completed:
    /// errors are not retried).
    pub failed: u64,
    /// Runs stopped by the runtime cap (the slot is abandoned).
    pub timed_out: u64,
    /// Runs stopped because the claim's lease was lost, or by a shutdown past its grace period
    /// (the slot is abandoned).
    pub cancelled: u64,
    /// Runs cancelled by the next slot under [`Concurrency::Replace`](crate::Concurrency::Replace).
    pub replaced: u64,
    /// Runs that were retries of a slot whose earlier runner died.
    pub retries: u64,
    /// Slots another worker had already completed or was running.
    pub elsewhere: u64,
    /// Slots skipped by [`Concurrency::Forbid`](crate::Concurrency::Forbid).
    pub forbidden: u64,
    /// Slots found abandoned and not retried (policy
    /// [`OnAbandoned::Skip`](crate::OnAbandoned::Skip), or attempts used up).
    pub abandoned: u64,
    /// Slots past their starting deadline when this worker got to them: **this worker's** view
    /// only. Another worker may well have run such a slot (a backup of a
    /// [fleet](crate::SchedulerBuilder::fleet) that gets to a slot late counts it here even
    /// though the first-ranked worker ran it), so summing `missed` over the fleet over-counts;
    /// a slot was missed fleet-wide only if no worker ran it, which
    /// [`Scheduler::slot_state`](crate::Scheduler::slot_state) tells (it reads
    /// [`SlotState::Free`](crate::SlotState::Free) or abandoned after its deadline).
    pub missed: u64,
    /// Slots within the deadline passed over by the catch-up policy.
    pub superseded: u64,
    /// Claims (or status reads) that failed: no quorum answered.
    pub claim_errors: u64,
    /// How late this worker's runs started after their due time (first attempts only).
    pub lateness: Lateness,
}

/// Start lateness of runs: from the slot's due time to the claim, on this worker's clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lateness {
    /// Runs measured.
    pub count: u64,
    /// The median over the last 1024 runs.
    pub p50: Duration,
    /// The 99th percentile over the last 1024 runs.
    pub p99: Duration,
    /// The largest ever.
    pub max: Duration,
}

/// What a counter counts, named as the `outcome` label.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Run,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    Replaced,
    Retry,
    Elsewhere,
    Forbidden,
    Abandoned,
    Missed,
    Superseded,
    ClaimError,
}

impl Count {
    const ALL: usize = 13;

    fn label(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::Replaced => "replaced",
            Self::Retry => "retry",
            Self::Elsewhere => "elsewhere",
            Self::Forbidden => "forbidden",
            Self::Abandoned => "abandoned",
            Self::Missed => "missed",
            Self::Superseded => "superseded",
            Self::ClaimError => "claim_error",
        }
    }
}

/// The live counters of one job.
#[derive(Debug)]
pub(crate) struct Counters {
    /// The `job` label of the metrics.
    #[cfg(feature = "metrics")]
    job: String,
    counts: [AtomicU64; Count::ALL],
    lateness: Mutex<LatenessState>,
}

#[derive(Debug, Default)]
struct LatenessState {
    count: u64,
    max: Duration,
    recent: VecDeque<Duration>,
}

impl Counters {
    pub(crate) fn new(job: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = job;
        Self {
            #[cfg(feature = "metrics")]
            job: job.to_string(),
            counts: Default::default(),
            lateness: Mutex::default(),
        }
    }

    pub(crate) fn add(&self, what: Count, n: u64) {
        if n == 0 {
            return;
        }
        self.counts[what as usize].fetch_add(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("quorumlock_scheduler_slots_total", "job" => self.job.clone(), "outcome" => what.label())
            .increment(n);
        #[cfg(not(feature = "metrics"))]
        let _ = what.label();
    }

    pub(crate) fn bump(&self, what: Count) {
        self.add(what, 1);
    }

    pub(crate) fn lateness(&self, late: Duration) {
        #[cfg(feature = "metrics")]
        metrics::histogram!("quorumlock_scheduler_lateness_seconds", "job" => self.job.clone())
            .record(late.as_secs_f64());
        let mut state = self
            .lateness
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.count += 1;
        state.max = state.max.max(late);
        if state.recent.len() == LATENESS_SAMPLES {
            state.recent.pop_front();
        }
        state.recent.push_back(late);
    }

    pub(crate) fn snapshot(&self) -> JobStats {
        let get = |what: Count| self.counts[what as usize].load(Ordering::Relaxed);
        let lateness = {
            let state = self
                .lateness
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut sorted: Vec<Duration> = state.recent.iter().copied().collect();
            sorted.sort_unstable();
            Lateness {
                count: state.count,
                p50: nearest_rank(&sorted, 0.50).unwrap_or_default(),
                p99: nearest_rank(&sorted, 0.99).unwrap_or_default(),
                max: state.max,
            }
        };
        JobStats {
            runs: get(Count::Run),
            succeeded: get(Count::Succeeded),
            failed: get(Count::Failed),
            timed_out: get(Count::TimedOut),
            cancelled: get(Count::Cancelled),
            replaced: get(Count::Replaced),
            retries: get(Count::Retry),
            elsewhere: get(Count::Elsewhere),
            forbidden: get(Count::Forbidden),
            abandoned: get(Count::Abandoned),
            missed: get(Count::Missed),
            superseded: get(Count::Superseded),
            claim_errors: get(Count::ClaimError),
            lateness,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up() {
        let c = Counters::new("j");
        c.bump(Count::Run);
        c.add(Count::Missed, 3);
        c.lateness(Duration::from_millis(5));
        let s = c.snapshot();
        assert_eq!((s.runs, s.missed, s.succeeded), (1, 3, 0));
        assert_eq!(s.lateness.count, 1);
        assert_eq!(s.lateness.max, Duration::from_millis(5));
    }

    /// With the `metrics` feature, counts and lateness reach the facade, labelled by job and
    /// outcome.
    #[cfg(feature = "metrics")]
    #[test]
    fn counts_reach_the_metrics_facade() {
        use std::collections::BTreeMap;
        use std::sync::Arc;

        use metrics::{
            Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
            SharedString, Unit,
        };

        type Seen = Arc<Mutex<BTreeMap<String, f64>>>;
        struct Entry(String, Seen);
        impl Entry {
            fn add(&self, v: f64) {
                *self
                    .1
                    .lock()
                    .expect("seen")
                    .entry(self.0.clone())
                    .or_default() += v;
            }
        }
        impl CounterFn for Entry {
            fn increment(&self, v: u64) {
                self.add(v as f64);
            }
            fn absolute(&self, _: u64) {}
        }
        impl HistogramFn for Entry {
            fn record(&self, _: f64) {
                self.add(1.0);
            }
        }
        struct Capture(Seen);
        impl Capture {
            fn entry(&self, key: &Key) -> Arc<Entry> {
                let labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                let name = format!("{}{{{}}}", key.name(), labels.join(","));
                Arc::new(Entry(name, Arc::clone(&self.0)))
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

        let seen = Seen::default();
        let capture = Capture(Arc::clone(&seen));
        metrics::with_local_recorder(&capture, || {
            let c = Counters::new("nightly");
            c.bump(Count::Run);
            c.add(Count::Missed, 2);
            c.lateness(Duration::from_millis(3));
        });
        let seen = seen.lock().expect("seen");
        assert_eq!(
            seen.get("quorumlock_scheduler_slots_total{job=nightly,outcome=run}"),
            Some(&1.0),
            "{seen:?}"
        );
        assert_eq!(
            seen.get("quorumlock_scheduler_slots_total{job=nightly,outcome=missed}"),
            Some(&2.0),
            "{seen:?}"
        );
        assert_eq!(
            seen.get("quorumlock_scheduler_lateness_seconds{job=nightly}"),
            Some(&1.0),
            "{seen:?}"
        );
    }
}
