//! The controller's one fenced store: a server on a loopback port that client processes send
//! JSON lines to ([`Store`], over [`json_lines`]), the fencing check explained once
//! ([`admit`]), and the log of every request as it was applied ([`State`]).
//!
//! Every workload uses it with its own request type ([`FencedRequest`]): the lock scenarios'
//! registers ([`resource`](crate::resource), the only requests that read and write data), the
//! cron executions ([`cron::request`](crate::cron::request)) and the workloads' events
//! ([`workload::request`](crate::workload::request)). A request type says what it keys its
//! tokens by (one register, a job's slot, a resource: [`FencedRequest::bar`]), which requests
//! are fenced at all, and what the log keeps and the store answers.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::json_lines;

/// The fencing check of one key whose highest accepted token is `bar`: an access without a
/// token is rejected, and so is one whose token is below the bar; an equal token passes (one
/// claim accesses several times, and a retry's `begin` and `write` carry the same token). An
/// admitted token raises the bar, so that any older claim is refused from then on.
///
/// # Errors
///
/// Why the access is refused: `no token`, or `stale token T < MAX`.
pub fn admit(bar: &mut Option<u64>, token: Option<u64>) -> Result<(), String> {
    match (token, *bar) {
        (None, _) => Err("no token".to_string()),
        (Some(t), Some(max)) if t < max => Err(format!("stale token {t} < {max}")),
        (Some(t), _) => {
            // Not below the bar (the arm above), so it is the new highest.
            *bar = Some(t);
            Ok(())
        }
    }
}

/// The fencing check of a read: as [`admit`], without raising the bar (readers that hold at
/// once, each with its own token, must not fence each other out; a write raises it for all).
///
/// # Errors
///
/// As [`admit`].
pub fn admit_read(bar: Option<u64>, token: Option<u64>) -> Result<(), String> {
    let mut probe = bar;
    admit(&mut probe, token)
}

/// What must pass the fence: the key whose bar it meets and the token it carries, or `None`
/// for an event that is logged and never refused.
pub type Bar<K> = Option<(K, Option<u64>)>;

/// A request to the fenced store: which key's bar it must pass, if any, and what it does.
pub trait FencedRequest: DeserializeOwned + Send + 'static {
    /// What the store keeps a highest token for.
    type Key: Hash + Eq + Send + std::fmt::Debug;
    /// What the requests read and write besides the bars (`()` for a store that only logs).
    type Data: Default + Send + std::fmt::Debug;
    /// What the log keeps of one request.
    type Entry: Send + std::fmt::Debug;
    /// One answer line.
    type Answer: Serialize + Send;

    /// The key whose bar this request must pass and the token it carries (`Ok(None)`: an
    /// event, logged and never refused).
    ///
    /// # Errors
    ///
    /// Why the request is refused before any token is looked at (it names no single key).
    fn bar(&self) -> Result<Bar<Self::Key>, String>;

    /// Whether an admitted token raises its key's bar ([`admit`]), or is only checked against
    /// it ([`admit_read`]).
    fn raises_bar(&self) -> bool {
        true
    }

    /// Applies the request at `time_ns` to `data` (unless it was refused, `refusal`): what the
    /// log keeps and what the store answers.
    fn apply(
        self,
        data: &mut Self::Data,
        time_ns: u64,
        refusal: Option<String>,
    ) -> (Self::Entry, Self::Answer);

    /// The answer to a line that is not a request (never applied).
    fn bad_request(error: &serde_json::Error) -> Self::Answer;
}

/// The store's state: each key's highest token, the data and the log.
#[derive(Debug)]
pub struct State<R: FencedRequest> {
    bars: HashMap<R::Key, Option<u64>>,
    /// What the requests read and write.
    pub data: R::Data,
    /// Every request, in the order of application.
    pub log: Vec<R::Entry>,
}

impl<R: FencedRequest> Default for State<R> {
    fn default() -> Self {
        Self {
            bars: HashMap::new(),
            data: R::Data::default(),
            log: Vec::new(),
        }
    }
}

impl<R: FencedRequest> State<R> {
    /// Applies one request at `time_ns` (host monotonic), logs it and answers it.
    pub fn apply(&mut self, req: R, time_ns: u64) -> R::Answer {
        let refusal = match req.bar() {
            Ok(None) => None,
            Ok(Some((key, token))) => {
                let bar = self.bars.entry(key).or_default();
                if req.raises_bar() {
                    admit(bar, token).err()
                } else {
                    admit_read(*bar, token).err()
                }
            }
            Err(why) => Some(why),
        };
        let (entry, answer) = req.apply(&mut self.data, time_ns, refusal);
        self.log.push(entry);
        answer
    }
}

/// The fenced store serving on a loopback port, in the background on the runtime that started
/// it.
#[derive(Debug)]
pub struct Store<R: FencedRequest> {
    /// Where client processes connect.
    pub addr: SocketAddr,
    state: Arc<Mutex<State<R>>>,
}

impl<R: FencedRequest> Clone for Store<R> {
    fn clone(&self) -> Self {
        Self {
            addr: self.addr,
            state: Arc::clone(&self.state),
        }
    }
}

impl<R: FencedRequest> Store<R> {
    /// Binds to a free loopback port (from `QUORUMLOCK_TEST_PORTS` when it is set) and serves each connection in its own task, every line
    /// answered under the state's lock (so the log orders requests as they were applied).
    ///
    /// # Errors
    ///
    /// When no port can be bound (or `QUORUMLOCK_TEST_PORTS` is malformed or full).
    pub async fn start() -> std::io::Result<Self> {
        let port = quorumlock_testkit::listener_port().map_err(std::io::Error::other)?;
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        // The latest time logged, read and written only under the state's lock.
        let last = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, last) = (Arc::clone(&shared), Arc::clone(&last));
                tokio::spawn(json_lines::serve(
                    stream,
                    move |request: Result<R, _>, arrival| match request {
                        Ok(req) => {
                            let mut state = lock(&state);
                            let at = stamp(last.load(Ordering::Relaxed), arrival);
                            last.store(at, Ordering::Relaxed);
                            state.apply(req, at)
                        }
                        Err(e) => R::bad_request(&e),
                    },
                ));
            }
        });
        Ok(Self { addr, state })
    }

    /// Reads the state (under its lock: keep `read` short, the store waits meanwhile).
    pub fn read<T>(&self, read: impl FnOnce(&State<R>) -> T) -> T {
        read(&lock(&self.state))
    }
}

impl<R: FencedRequest> Store<R>
where
    R::Entry: Clone,
{
    /// A copy of the log.
    pub fn log(&self) -> Vec<R::Entry> {
        self.read(|state| state.log.clone())
    }

    /// A copy of the last `n` entries of the log.
    pub fn tail(&self, n: usize) -> Vec<R::Entry> {
        self.read(|state| state.log[state.log.len().saturating_sub(n)..].to_vec())
    }
}

/// A client process's connection to the store.
pub type Client<R> = json_lines::Client<R, <R as FencedRequest>::Answer>;

/// The time a request is logged at: its arrival, or the latest time logged if that is later.
///
/// Connections stamp their requests as they come in, then take the state's lock in whatever
/// order the scheduler runs them: a read stamped before a write can be applied after it (a read
/// 0.18 ms "before" the write whose value it returned, which the effects checker would read as
/// two leases interleaving). This stamp follows the order of
/// application and still lies between the request's arrival and its application, where it
/// took effect.
fn stamp(last: u64, arrival: u64) -> u64 {
    last.max(arrival)
}

/// The state's lock; a panicked holder left it consistent (every `apply` is one push and one
/// insert), so a poisoned lock is used as it is.
fn lock<S>(state: &Mutex<S>) -> std::sync::MutexGuard<'_, S> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One logged request: its arrival and the store's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logged<R> {
    /// Host monotonic nanoseconds at arrival.
    pub time_ns: u64,
    /// The request.
    #[serde(flatten)]
    pub req: R,
    /// Whether it was applied.
    pub accepted: bool,
}

impl<R> Logged<R> {
    /// What a store that only logs keeps of `req` and answers (the `apply` of its requests).
    pub fn entry(req: R, time_ns: u64, refusal: Option<String>) -> (Self, StoreAnswer) {
        let accepted = refusal.is_none();
        let entry = Self {
            time_ns,
            req,
            accepted,
        };
        (
            entry,
            StoreAnswer {
                accepted,
                reason: refusal,
            },
        )
    }
}

/// The answer of a store that only accepts or rejects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreAnswer {
    /// Whether the request was applied.
    pub accepted: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl StoreAnswer {
    /// The answer to a line that is not a request.
    pub fn bad_request(error: &serde_json::Error) -> Self {
        Self {
            accepted: false,
            reason: Some(format!("bad request: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_refuses_missing_and_stale_tokens_and_raises_the_bar() {
        let mut bar = None;
        assert_eq!(admit(&mut bar, None), Err("no token".into()));
        assert_eq!(bar, None, "a refused access leaves the bar");
        assert_eq!(admit(&mut bar, Some(5)), Ok(()));
        assert_eq!(admit(&mut bar, Some(5)), Ok(()), "equal tokens pass");
        assert_eq!(admit(&mut bar, Some(4)), Err("stale token 4 < 5".into()));
        assert_eq!(admit(&mut bar, Some(9)), Ok(()));
        assert_eq!(bar, Some(9));
        assert_eq!(admit(&mut bar, None), Err("no token".into()));
        assert_eq!(admit_read(bar, Some(9)), Ok(()));
        assert_eq!(admit_read(bar, Some(8)), Err("stale token 8 < 9".into()));
        assert_eq!(admit_read(bar, None), Err("no token".into()));
        assert_eq!(admit_read(None, Some(1)), Ok(()));
    }
}
