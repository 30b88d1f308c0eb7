//! What the workloads' workers and observers report to the controller's
//! [fenced store](crate::fenced_store): fenced writes and the events of the history.
//!
//! A `write` names one resource and carries the fencing token of the claim it is made under;
//! per resource the store keeps the highest token it accepted and rejects any write below it,
//! and any write without a token (equal tokens pass: one claim writes several times). A `read`
//! (a read-write lock's reader) is checked the same way and does not raise the bar. Every
//! other request is an event of the history (a campaign or lock call begun, a grant, a claim
//! ended, a refusal, an observer's reading), logged and never rejected. Every request is stamped
//! with the host's monotonic clock on arrival; the times inside a request are the sender's
//! `CLOCK_MONOTONIC`, the same clock on one host.
//!
//! Protocol: one JSON object per line each way ([`Request`] → [`StoreAnswer`]).

use serde::{Deserialize, Serialize};

use crate::clock::now_ns;
use crate::fenced_store::{self, Bar, FencedRequest, Logged, StoreAnswer};

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A worker or observer is connected and about to start.
    Ready,
    /// A campaign or lock call begins (`at_ns`), with the identity it campaigns with.
    Call,
    /// The call returned a grant: `at_ns` when the validity was read, `valid_until_ns` what
    /// it said, `call_ns` when the call began.
    Grant,
    /// A write to one resource under a claim: `at_ns` when the validity was checked,
    /// `valid_until_ns` what the check said (the holder's belief).
    Write,
    /// A read of one resource under a reader's claim, as a write but below no later read.
    Read,
    /// The holder stopped believing it holds the claim (`at_ns`): before a resignation or a
    /// release, or when it saw the loss.
    End,
    /// A call gave up (`note`: the error).
    Refused,
    /// An observer's item: `identity` and `token` of a new leader, or neither for "no leader".
    Observed,
}

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// What it is.
    pub kind: Kind,
    /// The worker (observers are numbered after the workers).
    pub worker: usize,
    /// Its process id.
    pub pid: u32,
    /// The claim's number within the process (1, 2, ...); 0 for none.
    #[serde(default)]
    pub claim: u64,
    /// The resources (the election's name; a set; one resource for a write).
    #[serde(default)]
    pub resources: Vec<String>,
    /// The fencing token.
    #[serde(default)]
    pub token: Option<u64>,
    /// The identity campaigned with (elections).
    #[serde(default)]
    pub identity: String,
    /// The sender's monotonic clock at the event, ns.
    #[serde(default)]
    pub at_ns: u64,
    /// For a grant: when its call began, ns.
    #[serde(default)]
    pub call_ns: u64,
    /// For a grant or a write: the end of validity the holder believed in, ns.
    #[serde(default)]
    pub valid_until_ns: Option<u64>,
    /// For a grant: whether a lease renews it (later readings may extend the claim).
    #[serde(default)]
    pub renewed: bool,
    /// For a call or a grant: a reader's (a read-write lock's shared claim).
    #[serde(default)]
    pub shared: bool,
    /// Why (an end, a refusal).
    #[serde(default)]
    pub note: String,
}

impl Request {
    /// A request of `kind` from `worker`, stamped now, everything else empty.
    pub fn new(kind: Kind, worker: usize) -> Self {
        Self {
            kind,
            worker,
            pid: std::process::id(),
            claim: 0,
            resources: Vec::new(),
            token: None,
            identity: String::new(),
            at_ns: now_ns(),
            call_ns: 0,
            valid_until_ns: None,
            renewed: false,
            shared: false,
            note: String::new(),
        }
    }
}

impl FencedRequest for Request {
    /// A resource.
    type Key = String;
    type Data = ();
    type Entry = Access;
    type Answer = StoreAnswer;

    fn bar(&self) -> Result<Bar<Self::Key>, String> {
        match (self.kind, self.resources.as_slice()) {
            (Kind::Write | Kind::Read, [resource]) => Ok(Some((resource.clone(), self.token))),
            (Kind::Write | Kind::Read, _) => {
                Err("an access names exactly one resource".to_string())
            }
            _ => Ok(None),
        }
    }

    fn raises_bar(&self) -> bool {
        self.kind != Kind::Read
    }

    fn apply(self, (): &mut (), time_ns: u64, refusal: Option<String>) -> (Access, StoreAnswer) {
        Logged::entry(self, time_ns, refusal)
    }

    fn bad_request(error: &serde_json::Error) -> StoreAnswer {
        StoreAnswer::bad_request(error)
    }
}

/// One logged request: its arrival and the store's answer.
pub type Access = Logged<Request>;

/// The running store, with the highest token per resource and the log (only writes are ever
/// rejected).
pub type Store = fenced_store::Store<Request>;

/// A worker's or observer's connection to the store.
pub type Client = fenced_store::Client<Request>;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(resource: &str, token: Option<u64>) -> Request {
        let mut r = Request::new(Kind::Write, 0);
        r.resources = vec![resource.into()];
        r.token = token;
        r
    }

    #[test]
    fn stale_and_missing_tokens_are_rejected_per_resource() {
        let mut s = fenced_store::State::default();
        assert!(s.apply(write("a", Some(5)), 1).accepted);
        assert!(
            s.apply(write("a", Some(5)), 2).accepted,
            "equal tokens pass"
        );
        assert!(s.apply(write("a", Some(7)), 3).accepted);
        let stale = s.apply(write("a", Some(6)), 4);
        assert!(!stale.accepted);
        assert!(stale.reason.unwrap_or_default().contains("stale"));
        assert!(
            s.apply(write("b", Some(1)), 5).accepted,
            "b has its own bar"
        );
        assert!(!s.apply(write("b", None), 6).accepted);
        let mut two = write("a", Some(9));
        two.resources.push("b".into());
        assert!(!s.apply(two, 7).accepted);
        assert!(s.apply(Request::new(Kind::Grant, 0), 8).accepted);
        assert_eq!(s.log.len(), 8);
        // A read passes at or above the bar and leaves it where it was.
        let read = |token| {
            let mut r = write("a", Some(token));
            r.kind = Kind::Read;
            r
        };
        assert!(s.apply(read(12), 9).accepted);
        assert!(
            s.apply(read(8), 10).accepted,
            "the read of 12 did not raise the bar"
        );
        assert!(!s.apply(read(6), 11).accepted, "below the write of 7");
    }
}
