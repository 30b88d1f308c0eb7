//! One Redis master: per-request timeout, the bound on what piles up behind it when it stops
//! answering, and the lock operations on its keys.
//!
//! # Why a bound on unanswered requests
//!
//! Behind a paused master, every round would queue one more `SET` that runs when it resumes.
//! Requests abandoned without a reply are counted per connection; past
//! [`max_unanswered`](crate::RedlockBuilder::max_unanswered) no new lock request is sent on
//! that connection until a background probe (`PING`, queued behind everything else) is
//! answered.
//! Cleanups still go through: they are bounded by the acquisitions that were sent.

use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::error::NodeErrorKind;
use crate::keys::record_key;
use crate::mutant::Mutant;
use crate::restart_protection::LifeCheck;
use crate::restart_protection::{provision_reply, uptime_of_info};
use crate::round::master::{AcquireReply, AcquireRequest, Master};
use crate::scripts::{self, LuaScript};
use crate::scripts::{acquire_keys, acquire_reply, millis, AcquireNumbers};
use crate::transport::address::NodeAddress;
use crate::transport::endpoint::Endpoint;
use crate::transport::pooled::PooledConnection;
use crate::transport::reply::{flag_reply, set_nx_reply};
use crate::transport::resp::{Command, Decimal, Reply};
use crate::value::Ownership;

// Operations on a set of keys at once (lock sets, elections): a child module, so that it uses
// this node's private request path rather than widening it.
mod keyset;
// An operator's removal of keys left behind (src/admin.rs), from a child module likewise.
mod admin;
// A read-only look at a lock key for operators.
mod inspect;
// Hold-at-least releases (src/guard/hold.rs): their script goes through this node's private
// request path, from a child module.
mod script;
// Slot claims: their scripts, from a child module likewise.
mod slots;

/// One request to a master, about one key.
enum Request<'a> {
    /// A command's arguments: its name, then the key, then the rest.
    Args(&'a [&'a [u8]]),
    /// `EVALSHA`, falling back to `EVAL` if the server lost its script cache.
    Script {
        script: &'static LuaScript,
        /// The lock key first.
        keys: &'a [&'a [u8]],
        args: &'a [&'a [u8]],
    },
}

impl Request<'_> {
    /// The key the request is about, which picks its connection.
    fn key(&self) -> &[u8] {
        let key = match self {
            Request::Args(args) => args.get(1),
            Request::Script { keys, .. } => keys.first(),
        };
        key.copied().unwrap_or_default()
    }
}

/// A Redis master reached over a few lazily opened, pipelined connections.
pub(crate) struct RedisNode {
    address: NodeAddress,
    node_timeout: Duration,
    max_unanswered: usize,
    connect_timeout: Duration,
    fence_retention: Duration,
    /// A key always goes through the same one (see [`Self::connection_for`]).
    connections: Box<[PooledConnection]>,
    /// A deliberately broken release or extend, for the jepsen-lite harness only.
    mutant: Option<Mutant>,
    /// Requests that failed, for [`Redlock::stats`](crate::Redlock::stats).
    errors: AtomicU64,
}

impl RedisNode {
    /// The requests awaiting replies and the bytes queued on this master's open connections.
    #[cfg(feature = "sim")]
    pub(crate) fn footprint(&self) -> (usize, usize) {
        self.connections
            .iter()
            .filter_map(PooledConnection::current)
            .map(|pipeline| pipeline.footprint())
            .fold((0, 0), |(r, b), (r2, b2)| (r + r2, b + b2))
    }

    pub(crate) fn new(address: NodeAddress, config: &Config) -> Self {
        // Under restart protection every connection reads which life of the master it talks to.
        let life_check = config.restart_protection.then(|| LifeCheck {
            record_key: record_key(&config.key_prefix),
            node: Arc::from(address.display.as_str()),
            trust_durable: config.trust_durable_restarts
                || config.mutant == Some(Mutant::TrustDurableRestarts),
        });
        let connections = (0..config.connections_per_node)
            .map(|_| {
                PooledConnection::new(
                    Arc::clone(&address.endpoint),
                    config.connect_timeout,
                    life_check.clone(),
                )
            })
            .collect();
        Self {
            address,
            node_timeout: config.node_timeout,
            max_unanswered: config.max_unanswered,
            connect_timeout: config.connect_timeout,
            fence_retention: config.fence_retention,
            connections,
            mutant: config.mutant,
            errors: AtomicU64::new(0),
        }
    }

    /// The connection for `key`: always the same one, so that requests about one key run on
    /// the master in the order they were sent (a cleanup after the late `SET` it cleans up).
    fn connection_for(&self, key: &[u8]) -> &PooledConnection {
        &self.connections[connection_index(key, self.connections.len())]
    }

    /// How to reach this master (for the pub/sub connection of notified hand-offs).
    pub(crate) fn endpoint(&self) -> &Arc<Endpoint> {
        &self.address.endpoint
    }

    /// The mutant this master's requests run, if any (jepsen-lite and the simulation only).
    pub(crate) fn mutant(&self) -> Option<Mutant> {
        self.mutant
    }

    /// How many requests to this master failed so far.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// [`send`](Self::send), traced (node, outcome, latency: never keys or values, and the
    /// node's name has its password redacted) and counted.
    async fn request(
        &self,
        request: Request<'_>,
        cleanup: bool,
    ) -> Result<(Reply, bool), NodeErrorKind> {
        // The clock is read only when someone takes the latency: the metrics, or a subscriber
        // listening at the debug level (the failures' level).
        let timed = cfg!(feature = "metrics") || tracing::enabled!(tracing::Level::DEBUG);
        let start = timed.then(tokio::time::Instant::now);
        let result = self.send(request, cleanup).await;
        let latency = start.map(|start| start.elapsed()).unwrap_or_default();
        if timed {
            crate::stats::node_request(&self.address.display, latency, result.is_ok());
        }
        match &result {
            Ok(_) => {
                tracing::trace!(node = %self.address.display, ?latency, cleanup, "node replied")
            }
            Err(error) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = %self.address.display, ?latency, cleanup, %error, "node request failed");
            }
        }
        result
    }

    /// Sends one request and waits for its reply at most the node timeout. Returns the reply
    /// and whether it came from a retry on a fresh connection (after which a non-idempotent
    /// request may have run twice). `cleanup` requests bypass the unanswered-request bound.
    async fn send(
        &self,
        request: Request<'_>,
        cleanup: bool,
    ) -> Result<(Reply, bool), NodeErrorKind> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(NodeErrorKind::NoRuntime);
        }
        let deadline =
            crate::round::timing::deadline_after(tokio::time::Instant::now(), self.node_timeout);
        let pooled = self.connection_for(request.key());
        if !cleanup {
            let unanswered = pooled.backlog.unanswered.load(Ordering::Relaxed);
            if unanswered >= self.max_unanswered {
                self.start_probe(pooled);
                return Err(NodeErrorKind::Backlogged { unanswered });
            }
        }
        let mut retried = false;
        loop {
            let connected = tokio::time::timeout_at(deadline, pooled.get())
                .await
                .unwrap_or_else(|_| {
                    Err(NodeErrorKind::Connect(format!(
                        "not connected within {:?}",
                        self.node_timeout
                    )))
                });
            let (generation, conn) = match connected {
                Ok((generation, opened)) => (generation, opened.conn),
                // The first attempt was written before its connection broke, so it may have
                // taken effect: reconnecting failing does not make it "never sent".
                Err(NodeErrorKind::Connect(text)) if retried => {
                    return Err(NodeErrorKind::ConnectionLost(format!(
                        "connection broke, and reconnecting failed: {text}"
                    )))
                }
                Err(error) => return Err(error),
            };
            #[cfg(quorumlock_mutants)]
            if self.mutant == Some(Mutant::ReuseAfterTimeout) {
                conn.reuse_after_timeout();
            }
            // Counts this request as abandoned unless it gets its reply (timeout or drop).
            let pending = Unanswered::new(&pooled.backlog.unanswered);
            let reply = tokio::time::timeout_at(deadline, async {
                match request {
                    Request::Args(args) => conn.query(Command(&[args])).await,
                    Request::Script { script, keys, args } => {
                        let count = Decimal::new(keys.len() as u64);
                        let head: [&[u8]; 3] =
                            [b"EVALSHA", script.sha().as_bytes(), count.as_bytes()];
                        match conn.query(Command(&[&head, keys, args])).await {
                            // The script cache was flushed (or the master restarted under this
                            // connection): run the source, in the same place in the order.
                            Ok(Reply::Error(error)) if error.starts_with("NOSCRIPT") => {
                                let head: [&[u8]; 3] =
                                    [b"EVAL", script.source.as_bytes(), count.as_bytes()];
                                conn.query(Command(&[&head, keys, args])).await
                            }
                            other => other,
                        }
                    }
                }
            })
            .await;
            // Any outcome but a timeout is an answer: replies come in order, so a reply (or
            // the connection breaking) means nothing earlier is waiting any more.
            let kind = match reply {
                Err(_elapsed) => return Err(NodeErrorKind::Timeout(self.node_timeout)),
                Ok(Ok(Reply::Error(error))) => {
                    pending.answered();
                    return Err(NodeErrorKind::Server(error));
                }
                Ok(Ok(value)) => {
                    pending.answered();
                    return Ok((value, retried));
                }
                Ok(Err(kind)) => {
                    pending.answered();
                    kind
                }
            };
            let discarded = pooled.discard(generation);
            #[cfg(quorumlock_mutants)]
            if discarded && self.mutant == Some(Mutant::NoOrphanClose) {
                pooled.forget_orphan();
            }
            if discarded {
                tracing::debug!(node = %self.address.display, generation, error = %kind, "connection broken, discarding");
                pooled.backlog.unanswered.store(0, Ordering::Relaxed);
            }
            // A connection found dead (the master restarted, the peer closed it) is replaced
            // once, within the same deadline: the master is up, and the dead socket can deliver
            // nothing late. A parse error is not retried: the peer may not be a Redis server.
            let dead = matches!(kind, NodeErrorKind::ConnectionLost(_));
            if retried || !dead {
                return Err(kind);
            }
            retried = true;
        }
    }

    /// Compare-and-delete, announcing the release to notified waiters when `announce` (see
    /// [`Master::release_and_announce`]).
    async fn delete_claim(
        &self,
        key: &str,
        ownership: &Ownership,
        announce: bool,
    ) -> Result<bool, NodeErrorKind> {
        let script = match self.mutant {
            Some(Mutant::PlainDelRelease) => &scripts::PLAIN_DELETE,
            _ => &scripts::COMPARE_AND_DELETE,
        };
        let call = scripts::release_call(key, ownership, announce, script);
        let request = Request::Script {
            script: call.script,
            keys: call.keys(),
            args: call.args(),
        };
        let (reply, retried) = self.request(request, true).await?;
        let deleted = flag_reply(reply)?;
        if retried && !deleted {
            // The first attempt may have deleted the key before the connection broke: this
            // "not ours" may be our own release. Uncertain, so a failure rather than a refusal
            // (which would count towards "lost").
            return Err(NodeErrorKind::ConnectionLost(
                "connection broke; the retry found nothing to delete".into(),
            ));
        }
        Ok(deleted)
    }

    /// Sends a script request its file wrote ([`scripts::ScriptCall`]); see [`Self::request`].
    async fn send_call(
        &self,
        call: &scripts::ScriptCall<'_>,
        cleanup: bool,
    ) -> Result<(Reply, bool), NodeErrorKind> {
        let args = call.arg_slices();
        let request = Request::Script {
            script: call.script,
            keys: &call.keys,
            args: &args,
        };
        self.request(request, cleanup).await
    }

    /// Opens every connection to this master (waiting at most the connect timeout each).
    pub(crate) async fn connect(&self) -> Result<(), NodeErrorKind> {
        let opened = futures::future::join_all(self.connections.iter().map(|pooled| async {
            tokio::time::timeout(self.connect_timeout, pooled.get())
                .await
                .unwrap_or_else(|_| {
                    Err(NodeErrorKind::Connect(format!(
                        "not connected within {:?}",
                        self.connect_timeout
                    )))
                })
        }))
        .await;
        opened.into_iter().try_for_each(|result| result.map(|_| ()))
    }

    /// Writes an epoch marker of age "forever" (`0`, the epoch of the node's clock) and vouches
    /// for the master's current life (its `run_id`), so that restart protection counts it at
    /// once until it restarts. Returns the `run_id` and the uptime it vouched for.
    pub(crate) async fn provision(
        &self,
        epoch_key: &str,
        record_key: &str,
    ) -> Result<(String, Duration), NodeErrorKind> {
        // Every connection open first: each read the master's life, and is told below that
        // this life is now vouched for (instead of waiting for a reconnect).
        self.connect().await?;
        let keys = [epoch_key.as_bytes(), record_key.as_bytes()];
        let script = Request::Script {
            script: &scripts::PROVISION,
            keys: &keys,
            args: &[],
        };
        let (reply, _) = self.request(script, false).await?;
        let (run_id, uptime) = provision_reply(reply)?;
        for pooled in self.connections.iter() {
            pooled.vouch(&run_id);
        }
        Ok((run_id, uptime))
    }

    /// How long the master's current process has been running (`INFO server`).
    pub(crate) async fn uptime(&self) -> Result<Duration, NodeErrorKind> {
        let info: [&[u8]; 2] = [b"INFO", b"server"];
        let (reply, _) = self.request(Request::Args(&info), false).await?;
        uptime_of_info(&reply)
    }

    /// Starts one background `PING` on `pooled`'s connection that waits, without a timeout, for
    /// the master to answer everything queued on it before; then the connection is used again.
    fn start_probe(&self, pooled: &PooledConnection) {
        let backlog = &pooled.backlog;
        if backlog.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            backlog.probing.store(false, Ordering::Release);
            return;
        };
        let conn = pooled.current();
        let unanswered = Arc::clone(&backlog.unanswered);
        let probing = Arc::clone(&backlog.probing);
        let node = self.address.display.clone();
        tracing::warn!(%node, "node stopped answering; holding back requests until it does");
        runtime.spawn(async move {
            if let Some(conn) = conn {
                // Any outcome (a reply or a broken connection) means nothing is queued anymore.
                let _ = conn.query(Command(&[&[b"PING"]])).await;
            }
            tracing::info!(%node, "node answers again");
            unanswered.store(0, Ordering::Relaxed);
            probing.store(false, Ordering::Release);
        });
    }
}

/// Which of `n` connections `key` uses: a fixed hash (the same in every process), so a key's
/// requests share one connection.
fn connection_index(key: &[u8], n: usize) -> usize {
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(key);
    // The remainder is below `n`, which is a `usize`.
    (hasher.finish() % n.max(1) as u64) as usize
}

/// Counts a request as abandoned when dropped before [`answered`](Self::answered).
struct Unanswered<'a> {
    counter: &'a AtomicUsize,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        Self {
            counter,
            answered: false,
        }
    }

    fn answered(mut self) {
        self.answered = true;
        // Replies come in order, so a reply means every earlier request on its connection was
        // answered too.
        self.counter.store(0, Ordering::Relaxed);
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Master for RedisNode {
    fn name(&self) -> &str {
        &self.address.display
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply, NodeErrorKind> {
        let (mut value, retried) = if request.is_plain() {
            // The hot path: a plain `SET`, with the TTL written straight into the command.
            let ttl = Decimal::new(millis(request.ttl));
            let set: [&[u8]; 6] = [
                b"SET",
                request.key.as_bytes(),
                request.ownership.value.as_str().as_bytes(),
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ];
            let (reply, retried) = self.request(Request::Args(&set), false).await?;
            let granted = set_nx_reply(reply)?;
            (
                AcquireReply {
                    granted,
                    blocked: false,
                    token: None,
                    epoch_age: None,
                    remaining: None,
                },
                retried,
            )
        } else {
            let numbers = AcquireNumbers::new(&request);
            let (keys, args) = (acquire_keys(&request), numbers.args(&request));
            let script = Request::Script {
                script: &scripts::ACQUIRE,
                keys: &keys,
                args: &args,
            };
            let (reply, retried) = self.request(script, false).await?;
            (
                acquire_reply(
                    reply,
                    request.fence_key.is_some(),
                    request.epoch_key.is_some(),
                )?,
                retried,
            )
        };
        if request.epoch_key.is_some() {
            // Restart protection: the master's age is the younger of its epoch marker (data
            // lost) and its current life (restarted, whatever it reloaded). With no connection
            // open any more, the life is unknown: counted as just restarted.
            let life = self.life_age(request.key.as_bytes());
            value.epoch_age = crate::restart_protection::master_age(value.epoch_age, life);
        }
        if retried && !value.granted {
            // The first attempt may have set the key before the connection broke: this "no"
            // may be our own key. Report a failure, which the round cleans up.
            return Err(NodeErrorKind::ConnectionLost(
                "connection broke; the retry found the key already set".into(),
            ));
        }
        Ok(value)
    }

    async fn raise_fence(
        &self,
        fence_key: &str,
        token: u64,
        retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let token = Decimal::new(token);
        let retention = Decimal::new(millis(retention.max(self.fence_retention)));
        let call = scripts::raise_call(fence_key, &token, &retention);
        let request = Request::Script {
            script: call.script,
            keys: call.keys(),
            args: call.args(),
        };
        let (reply, _) = self.request(request, false).await?;
        flag_reply(reply)
    }

    async fn compare_and_delete(
        &self,
        key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        self.delete_claim(key, ownership, false).await
    }

    async fn release_and_announce(
        &self,
        key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        self.delete_claim(key, ownership, true).await
    }

    async fn compare_and_pexpire(
        &self,
        key: &str,
        ownership: &Ownership,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let ttl = Decimal::new(millis(ttl));
        // A slot's run renews its record with its claim (unless the mutant forgets to).
        let companion = ownership
            .companion
            .as_ref()
            .filter(|_| self.mutant != Some(Mutant::SlotRecordNotRenewed))
            .map(|companion| (companion, Decimal::new(millis(companion.keep))));
        let plain = match self.mutant {
            Some(Mutant::ExtendRecreates) => &scripts::EXTEND_RECREATES,
            _ => &scripts::COMPARE_AND_PEXPIRE,
        };
        let companion = companion.as_ref().map(|(c, keep)| (&*c.key, keep));
        let call = scripts::extend_call(key, ownership, &ttl, companion, plain);
        let request = Request::Script {
            script: call.script,
            keys: call.keys(),
            args: call.args(),
        };
        let (reply, _) = self.request(request, false).await?;
        flag_reply(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::connection_index;

    #[test]
    fn keys_spread_over_every_connection_and_keep_theirs() {
        for n in [1, 2, 3, 8] {
            let mut used = vec![0usize; n];
            for i in 0..400 {
                let key = format!("quorumlock:job-{i}");
                let index = connection_index(key.as_bytes(), n);
                assert_eq!(index, connection_index(key.as_bytes(), n), "stable");
                used[index] += 1;
            }
            // Roughly even: every connection gets at least half its share.
            assert!(used.iter().all(|&u| u >= 400 / n / 2), "{n}: {used:?}");
        }
        assert_eq!(connection_index(b"", 1), 0);
    }
}
