//! What the controller's three fenced stores have in common (the resource's registers in
//! [`resource`](crate::resource), the cron store in [`cron::store`](crate::cron::store), the
//! workload store in [`workload::store`](crate::workload::store)): the fencing check, explained
//! once ([`admit`]); the server that runs a store's state behind the JSON-lines wire of
//! [`json_lines`] ([`Served`]); and, for the two stores whose log is the request as it came,
//! the state that fences by key and logs ([`FencedLog`], with [`Logged`] entries and
//! accept-or-reject [`StoreAnswer`]s).
//!
//! Each store keeps what differs: what its requests are, what it keys its tokens by (one
//! register, a job's slot, a resource: [`FencedRequest::bar`]), and which requests it
//! fences at all.

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

/// A store's state: what it answers to each request, applied one at a time under a lock.
pub trait StoreState: Default + Send + 'static {
    /// One request line.
    type Request: DeserializeOwned + Send;
    /// One response line.
    type Response: Serialize + Send;

    /// Applies `req` at `arrival_ns` (host monotonic: its arrival, or the previous request's
    /// time if that is later, so that times follow the order of application), and answers it.
    fn answer(&mut self, req: Self::Request, arrival_ns: u64) -> Self::Response;

    /// The answer to a line that is not a request (never applied).
    fn bad_request(error: &serde_json::Error) -> Self::Response;
}

/// A store serving on a loopback port, in the background on the runtime that started it.
#[derive(Debug)]
pub struct Served<S> {
    /// Where client processes connect.
    pub addr: SocketAddr,
    state: Arc<Mutex<S>>,
}

impl<S> Clone for Served<S> {
    fn clone(&self) -> Self {
        Self {
            addr: self.addr,
            state: Arc::clone(&self.state),
        }
    }
}

impl<S: StoreState> Served<S> {
    /// Binds to a free loopback port and serves each connection in its own task, every line
    /// answered under the state's lock (so the log orders accesses as they were applied).
    ///
    /// # Errors
    ///
    /// When no port can be bound.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(S::default()));
        let shared = Arc::clone(&state);
        // The latest time logged, read and written only under the state's lock.
        let last = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, last) = (Arc::clone(&shared), Arc::clone(&last));
                tokio::spawn(json_lines::serve(
                    stream,
                    move |request: Result<S::Request, _>, arrival| match request {
                        Ok(req) => {
                            let mut state = lock(&state);
                            let at = stamp(last.load(Ordering::Relaxed), arrival);
                            last.store(at, Ordering::Relaxed);
                            state.answer(req, at)
                        }
                        Err(e) => S::bad_request(&e),
                    },
                ));
            }
        });
        Ok(Self { addr, state })
    }

    /// Reads the state (under its lock: keep `read` short, the store waits meanwhile).
    pub fn read<R>(&self, read: impl FnOnce(&S) -> R) -> R {
        read(&lock(&self.state))
    }
}

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

/// The state's lock; a panicked holder left it consistent (every `answer` is one push and one
/// insert), so a poisoned lock is used as it is.
fn lock<S>(state: &Mutex<S>) -> std::sync::MutexGuard<'_, S> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a request must pass: the key whose bar it meets and the token it carries, or `None`
/// for an event that is logged and never refused.
pub type Bar<K> = Option<(K, Option<u64>)>;

/// A request to a store that fences by key and logs every request as it came (the cron and
/// workload stores): which key's bar it must pass, if any.
pub trait FencedRequest: DeserializeOwned + Send + 'static {
    /// What the store keeps a highest token for.
    type Key: Hash + Eq + Send;

    /// The key whose bar this request must pass and the token it carries (`Ok(None)`: an
    /// event, logged and never refused).
    ///
    /// # Errors
    ///
    /// Why the request is refused before any token is looked at (it names no single key).
    fn bar(&self) -> Result<Bar<Self::Key>, String>;
}

/// The state of a store that fences its requests by key ([`admit`] against each key's highest
/// token) and logs every one with its arrival and its answer.
#[derive(Debug)]
pub struct FencedLog<R: FencedRequest> {
    bars: HashMap<R::Key, Option<u64>>,
    /// Every request, in arrival order.
    pub log: Vec<Logged<R>>,
}

impl<R: FencedRequest> Default for FencedLog<R> {
    fn default() -> Self {
        Self {
            bars: HashMap::new(),
            log: Vec::new(),
        }
    }
}

impl<R: FencedRequest> FencedLog<R> {
    /// Applies one request arriving at `time_ns` and logs it.
    pub fn apply(&mut self, req: R, time_ns: u64) -> StoreAnswer {
        let rejection = match req.bar() {
            Ok(None) => None,
            Ok(Some((key, token))) => admit(self.bars.entry(key).or_default(), token).err(),
            Err(why) => Some(why),
        };
        let accepted = rejection.is_none();
        self.log.push(Logged {
            time_ns,
            req,
            accepted,
        });
        StoreAnswer {
            accepted,
            reason: rejection,
        }
    }
}

impl<R: FencedRequest> StoreState for FencedLog<R> {
    type Request = R;
    type Response = StoreAnswer;

    fn answer(&mut self, req: R, arrival_ns: u64) -> StoreAnswer {
        self.apply(req, arrival_ns)
    }

    fn bad_request(error: &serde_json::Error) -> StoreAnswer {
        StoreAnswer {
            accepted: false,
            reason: Some(format!("bad request: {error}")),
        }
    }
}

impl<R: FencedRequest + Clone> Served<FencedLog<R>> {
    /// A copy of the log.
    pub fn log(&self) -> Vec<Logged<R>> {
        self.read(|state| state.log.clone())
    }

    /// A copy of the last `n` entries of the log.
    pub fn tail(&self, n: usize) -> Vec<Logged<R>> {
        self.read(|state| state.log[state.log.len().saturating_sub(n)..].to_vec())
    }
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

/// The answer of a store that only accepts or rejects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreAnswer {
    /// Whether the request was applied.
    pub accepted: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
    }
}
