//! The `acquire`, `extend` and `release` spans carry the retry count, the outcome, the validity
//! left and per-node latency, and no output carries a lock value or a password.

mod support;

use std::fmt::{Debug, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{cluster, key, patient_builder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every span name, span field and event field, as text.
#[derive(Clone, Default)]
struct Capture {
    text: Arc<Mutex<String>>,
    next_id: Arc<AtomicU64>,
}

impl Capture {
    fn text(&self) -> String {
        self.text.lock().expect("capture").clone()
    }
}

impl Visit for Capture {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let mut text = self.text.lock().expect("capture");
        let _ = write!(text, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let _ = write!(
            self.text.lock().expect("capture"),
            "\nspan {}",
            span.metadata().name()
        );
        span.record(&mut self.clone());
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut self.clone());
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        self.text.lock().expect("capture").push_str("\nevent");
        event.record(&mut self.clone());
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// One lock's life, with one master behind a wrong password: the traces show what an operator
/// needs and nothing secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_show_outcomes_and_latency_but_no_secrets() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).expect("the only subscriber");

    let cluster = cluster(3);
    let mut urls = cluster.urls();
    urls[0] = urls[0].replace("redis://", "redis://user:hunter2@");
    let locks = patient_builder(&urls).build().expect("manager");
    let mut guard = locks
        .try_lock("traced", Duration::from_secs(10))
        .await
        .expect("two of three grant");
    let value = cluster[1].command(&["GET", &key("traced")]).expect("GET");
    assert_eq!(value.len(), 32, "a lock value: {value}");
    guard.extend(Duration::from_secs(10)).await.expect("extend");
    guard.release().await.expect("release");

    let text = capture.text();
    for expected in [
        "span acquire",
        "retry=0",
        "outcome=\"granted\"",
        "validity_left=",
        "span extend",
        "outcome=\"extended\"",
        "span release",
        "outcome=\"released\"",
        "latency=",
        "user:***@",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:{text}");
    }
    assert!(!text.contains("hunter2"), "a password in the traces:{text}");
    assert!(!text.contains(&value), "a lock value in the traces:{text}");
}
