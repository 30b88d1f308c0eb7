//! What a cron job execution reports to the controller's [fenced store](crate::fenced_store),
//! fenced by `(job, slot)`.
//!
//! An execution sends a `begin` when it starts and a `write` (its one side effect) when its
//! work is done, both carrying the fencing token of its claim. Per key the store keeps the
//! highest token it accepted and rejects any access below it (a `begin` counts, so a retry that
//! started makes the stale runner's later write fail), and any access without a token. It
//! also logs each worker's wall-clock readings (`clock`), from which the controller proves the
//! clock shim's offsets and rate. Every access is stamped with the host's monotonic clock on
//! arrival.
//!
//! `resource.rs`'s register does not fit: it holds one counter for the whole run, while the
//! tokens of slot claims are per slot and must be compared per slot.
//!
//! Protocol: one JSON object per line each way ([`Request`] → [`StoreAnswer`]).

use serde::{Deserialize, Serialize};

use crate::fenced_store::{self, Bar, FencedRequest, Logged, StoreAnswer};

/// What an access is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A worker's wall clock, read with its monotonic clock (no key, never rejected).
    Clock,
    /// An execution starts.
    Begin,
    /// An execution's side effect: what "the slot ran" means.
    Write,
}

/// One request line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// What it is.
    pub kind: Kind,
    /// The worker (0-based).
    pub worker: usize,
    /// Its process id.
    pub pid: u32,
    /// The job (empty for `clock`).
    #[serde(default)]
    pub job: String,
    /// The slot's due instant, Unix milliseconds (0 for `clock`).
    #[serde(default)]
    pub slot_ms: i64,
    /// The fencing token of the claim.
    #[serde(default)]
    pub token: Option<u64>,
    /// Which claim of the slot (1, or more for a retry).
    #[serde(default)]
    pub attempt: u32,
    /// The worker's wall clock (its shimmed `CLOCK_REALTIME`), Unix microseconds.
    pub wall_us: i64,
    /// The worker's `CLOCK_MONOTONIC` read right after it (the host's, never shimmed).
    pub mono_ns: u64,
    /// For `begin`: how late the run started by the worker's own clock, ms.
    #[serde(default)]
    pub own_lateness_ms: Option<f64>,
}

impl FencedRequest for Request {
    /// A slot: `(job, slot_ms)`.
    type Key = (String, i64);
    type Data = ();
    type Entry = Access;
    type Answer = StoreAnswer;

    fn bar(&self) -> Result<Bar<Self::Key>, String> {
        Ok(match self.kind {
            Kind::Clock => None,
            Kind::Begin | Kind::Write => Some(((self.job.clone(), self.slot_ms), self.token)),
        })
    }

    fn apply(self, (): &mut (), time_ns: u64, refusal: Option<String>) -> (Access, StoreAnswer) {
        Logged::entry(self, time_ns, refusal)
    }

    fn bad_request(error: &serde_json::Error) -> StoreAnswer {
        StoreAnswer::bad_request(error)
    }
}

/// One logged access: the request, its arrival and the store's answer.
pub type Access = Logged<Request>;

/// The running store, with the highest token per slot and the log.
pub type Store = fenced_store::Store<Request>;

/// A worker's connection to the store.
pub type Client = fenced_store::Client<Request>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::now_ns;

    fn req(kind: Kind, slot_ms: i64, token: Option<u64>) -> Request {
        Request {
            kind,
            worker: 0,
            pid: 1,
            job: "a".into(),
            slot_ms,
            token,
            attempt: 1,
            wall_us: 0,
            mono_ns: 0,
            own_lateness_ms: None,
        }
    }

    #[test]
    fn stale_and_missing_tokens_are_rejected_per_slot() {
        let mut s = fenced_store::State::default();
        assert!(s.apply(req(Kind::Begin, 1000, Some(5)), 1).accepted);
        // A retry's begin raises the bar: the first runner's write is stale.
        assert!(s.apply(req(Kind::Begin, 1000, Some(7)), 2).accepted);
        let stale = s.apply(req(Kind::Write, 1000, Some(5)), 3);
        assert!(!stale.accepted);
        assert!(stale.reason.unwrap_or_default().contains("stale"));
        assert!(s.apply(req(Kind::Write, 1000, Some(7)), 4).accepted);
        // Equal tokens pass (the same execution's begin and write).
        assert!(s.apply(req(Kind::Write, 1000, Some(7)), 5).accepted);
        // Another slot has its own bar.
        assert!(s.apply(req(Kind::Write, 2000, Some(1)), 6).accepted);
        assert!(!s.apply(req(Kind::Write, 2000, None), 7).accepted);
        // Clock readings are never rejected.
        assert!(s.apply(req(Kind::Clock, 0, None), 8).accepted);
        assert_eq!(s.log.len(), 8);
    }

    #[tokio::test]
    async fn serves_over_tcp_and_stamps_arrival() {
        let store = Store::start().await.expect("starts");
        let mut client = Client::connect(store.addr).await.expect("connects");
        let before = now_ns();
        let r = client
            .call(&req(Kind::Write, 1000, Some(3)))
            .await
            .expect("call");
        assert!(r.accepted);
        let log = store.log();
        assert_eq!(log.len(), 1);
        assert!(log[0].time_ns >= before);
        assert_eq!(log[0].req.token, Some(3));
    }
}
