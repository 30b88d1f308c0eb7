//! [`Redlock`]: the lock manager and its three ways to acquire.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquisition::{Acquisition, Line, Patience, PollDelay};
use crate::config::{Config, RedlockBuilder};
use crate::error::{ConfigError, LockError, NodeError, NodeErrorKind};
use crate::guard::LockGuard;
use crate::keys::{epoch_key, lock_keys, record_key};
use crate::owner::Owner;
use crate::round::terms::{round_terms, RoundTerms};
use crate::round::timing::{deadline_after, quorum};
use crate::round::{self, LockKeys, RoundFailure};
use crate::shared::Shared;
use crate::stats::{NodeStats, Stats};
use crate::transport::node::RedisNode;
use crate::wake::WakeHub;

/// A Redlock manager over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside) and safe to share between tasks: every clone uses the same
/// connections: a few pipelined connections per master
/// ([`RedlockBuilder::connections_per_node`]), opened lazily or by [`Redlock::connect`].
///
/// With a single master (N = 1) this is the single-instance Redis lock, through the same code.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let locks = quorumlock::Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .build()?;
/// let guard = locks.lock("job:42", Duration::from_secs(10)).await?;
/// // ... work, finishing well within guard.remaining() ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<&str> = self.node_names().collect();
        f.debug_struct("Redlock")
            .field("nodes", &nodes)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl RedlockBuilder {
    /// Validates the settings and builds the manager. Connects to nothing.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the setting and what it expected when no node is given, a URL does
    /// not parse (the message shows the URL with its password redacted), a master is listed twice,
    /// the drift factor is outside `[0, 1)`, a timeout or `max_unanswered` is zero,
    /// `connections_per_node` is outside 1 to 64, or `fence_retention` or `max_ttl` is zero or
    /// beyond [`limits::MAX_TTL`](crate::limits::MAX_TTL). Timeouts and delays too long for the
    /// clock are not errors: they saturate (about 30 years, as good as none).
    pub fn build(self) -> Result<Redlock, ConfigError> {
        let (config, addresses) = self.validate()?;
        if addresses.len() == 2 {
            // Accepted (a test, a migration), but a quorum of 2 of 2 survives no failure.
            tracing::warn!(
                "2 masters: a quorum is both of them, so one master down stops every lock; \
                 use 3 or more for fault tolerance"
            );
        }
        let nodes = addresses
            .into_iter()
            .map(|address| Arc::new(RedisNode::new(address, &config)))
            .collect();
        Ok(Redlock::from_parts(nodes, config))
    }
}

impl Redlock {
    /// A builder with every setting at its default; add masters with
    /// [`nodes`](RedlockBuilder::nodes).
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_parts(nodes: Vec<Arc<RedisNode>>, config: Config) -> Self {
        let endpoints = nodes
            .iter()
            .map(|node| Arc::clone(node.endpoint()))
            .collect();
        let wakes = WakeHub::new(endpoints, config.node_timeout, config.connect_timeout);
        Self {
            shared: Arc::new(Shared {
                nodes: nodes.into(),
                config,
                counters: Arc::default(),
                reentrant_holds: Arc::default(),
                wakes,
            }),
        }
    }

    /// The manager's settings (for the lease's checks).
    pub(crate) fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The state this handle shares with its guards (for the entry points kept in their own
    /// modules: lock sets, elections).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The number of masters.
    pub fn node_count(&self) -> usize {
        self.shared.nodes.len()
    }

    /// The number of masters that must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum(self.node_count())
    }

    /// How long one master is waited for in a round
    /// ([`node_timeout`](RedlockBuilder::node_timeout)): a round that every master answers or
    /// fails takes about this long at most.
    pub fn node_timeout(&self) -> Duration {
        self.shared.config.node_timeout
    }

    /// The masters' addresses, in configuration order, with passwords redacted.
    pub fn node_names(&self) -> impl Iterator<Item = &str> + '_ {
        use crate::round::master::Master;
        self.shared.nodes.iter().map(|n| n.name())
    }

    /// A snapshot of this manager's counters: acquisition rounds by outcome, extensions,
    /// releases, lost locks and failed requests per master. Shared by every handle on the same
    /// masters; cheap enough to call on every scrape.
    ///
    /// ```no_run
    /// # async fn run(locks: quorumlock::Redlock) {
    /// let stats = locks.stats();
    /// println!("{} grants, {} contended, {} lost", stats.grants, stats.contended, stats.lost);
    /// for node in &stats.nodes {
    ///     println!("{}: {} failed requests", node.node, node.errors);
    /// }
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        use crate::round::master::Master;
        let nodes = self
            .shared
            .nodes
            .iter()
            .map(|node| NodeStats {
                node: node.name().to_string(),
                errors: node.errors(),
            })
            .collect();
        self.shared.counters.snapshot(nodes)
    }

    /// A handle on the same masters and connections whose acquisitions are **reentrant** for
    /// `owner`: while `owner` holds a resource, acquiring it again through a handle of the same
    /// owner succeeds at once (a quorum round that finds the owner's key), and the lock is
    /// freed only when every one of these acquisitions has been released or has expired.
    ///
    /// Each acquisition is recorded as its own member next to the lock key, so a release that
    /// is lost, repeated or sent to a master that never saw the acquisition can never free the
    /// lock under another acquisition of the same owner. The key lives as long as the longest
    /// TTL any of the owner's acquisitions asked for. Other owners, reentrant or not, are
    /// refused as usual.
    ///
    /// With fencing ([`fenced`](Self::fenced)), an acquisition
    /// made while another guard of the owner on the resource is still valid carries that
    /// guard's token ([`LockGuard::fence`]), so that the outer guard's writes are not rejected
    /// after an inner one's. The token is kept in this process by the handles derived from this
    /// manager; the next acquisition after every guard was released or ran out gets a higher
    /// one.
    ///
    /// ```no_run
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// use std::time::Duration;
    /// let mine = locks.reentrant(quorumlock::Owner::new());
    /// let outer = mine.lock("job:42", Duration::from_secs(10)).await?;
    /// let inner = mine.lock("job:42", Duration::from_secs(10)).await?; // same owner: granted
    /// inner.release().await?; // still held by `outer`
    /// outer.release().await?; // now free
    /// # Ok(())
    /// # }
    /// ```
    pub fn reentrant(&self, owner: Owner) -> Redlock {
        self.derived(|config| config.owner = Some(owner.value().clone()))
    }

    /// A handle on the same masters and connections whose acquisitions return fencing tokens
    /// ([`LockGuard::fence`]): the one way to turn fencing on. A token is a `u64` strictly
    /// greater than the token of every earlier grant of the same resource whose lease has ended,
    /// as long as a majority of masters keeps its data. Usually no extra round trip: masters
    /// whose clocks agree within half a second all issue the token the client proposes;
    /// otherwise the token is first written back to a quorum (one more round trip). Each
    /// acquisition runs a script instead of a plain `SET`. Fenced and plain handles share
    /// connections, counters and the waiter lines; elections are always fenced.
    pub fn fenced(&self) -> Redlock {
        self.derived(|config| config.fencing = true)
    }

    /// A handle on the same masters, connections, counters and holds, with `change` made to a
    /// copy of the settings.
    fn derived(&self, change: impl FnOnce(&mut Config)) -> Redlock {
        let mut config = self.shared.config.clone();
        change(&mut config);
        Redlock {
            shared: Arc::new(Shared {
                nodes: Arc::clone(&self.shared.nodes),
                config,
                counters: Arc::clone(&self.shared.counters),
                reentrant_holds: Arc::clone(&self.shared.reentrant_holds),
                wakes: self.shared.wakes.clone(),
            }),
        }
    }

    /// Opens every connection to every master now (they are otherwise opened on first use, in
    /// the background), waiting at most the connect timeout: a check of the configuration at
    /// start-up, and a way to keep the first locks from waiting for connections.
    ///
    /// # Errors
    ///
    /// [`LockError::QuorumUnreachable`] naming each master that could not be reached (a refused
    /// connection, wrong credentials, a peer that does not speak Redis); the resource in the
    /// error is `"<connect>"`. Connections to the other masters are open.
    pub async fn connect(&self) -> Result<(), LockError> {
        let nodes = &self.shared.nodes;
        let results = futures::future::join_all(nodes.iter().map(|node| node.connect())).await;
        self.every_node("<connect>", results)
    }

    /// `Ok` if every master succeeded, else the masters that failed, under `what`.
    fn every_node(
        &self,
        what: &str,
        results: Vec<Result<(), NodeErrorKind>>,
    ) -> Result<(), LockError> {
        use crate::round::master::Master;
        let nodes = &self.shared.nodes;
        let failures: Vec<NodeError> = nodes
            .iter()
            .zip(results)
            .filter_map(|(node, result)| result.err().map(|kind| NodeError::new(node.name(), kind)))
            .collect();
        if failures.is_empty() {
            return Ok(());
        }
        Err(LockError::QuorumUnreachable {
            resource: what.into(),
            granted: nodes.len() - failures.len(),
            nodes: nodes.len(),
            quorum: self.quorum(),
            failures,
        })
    }

    /// Marks every master as usable at once under restart protection, by writing an old epoch
    /// marker and vouching for the master's current process (its `run_id`): the provisioning
    /// step of a **brand-new** deployment, whose masters would otherwise look like masters that
    /// just restarted and be kept out of quorums for one max TTL. A master provisioned this way
    /// counts until it restarts; after a restart (whatever data it reloads, the record names the
    /// old process) it is quarantined again.
    ///
    /// Only call this on masters known not to have granted any lock that may still be valid
    /// (new, or idle for longer than the max TTL): provisioning a master that lost live locks
    /// gives up the protection for it. [`master_uptimes`](Self::master_uptimes) tells which
    /// masters started less than one max TTL ago (the `quorumlock provision` command refuses
    /// those unless given `--force`).
    ///
    /// # Errors
    ///
    /// [`LockError::QuorumUnreachable`] naming each master that could not be marked within the
    /// connect timeout (the others are marked); the resource in the error is `"<provision>"`.
    ///
    /// # Cancel safety
    ///
    /// Idempotent: a cancelled call may have marked some masters; call it again.
    pub async fn provision(&self) -> Result<(), LockError> {
        let config = &self.shared.config;
        let key = epoch_key(config);
        let record = record_key(&config.key_prefix);
        let nodes = &self.shared.nodes;
        // An administrative call, not a hot path: each master gets several attempts within
        // the connect timeout, so a cold or busy connection does not fail it.
        let patience = config.connect_timeout.max(config.node_timeout);
        let results = futures::future::join_all(nodes.iter().map(|node| async {
            let deadline = deadline_after(Instant::now(), patience);
            loop {
                match node.provision(&key, &record).await.map(drop) {
                    Err(kind) if kind.may_retry() && Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    outcome => return outcome,
                }
            }
        }))
        .await;
        self.every_node("<provision>", results)
    }

    /// How long each master's current process has been running (`INFO server`'s
    /// `uptime_in_seconds`, whole seconds), in the order of the nodes, each with the master's
    /// name (password redacted). A master that started less than
    /// [`max_ttl`](RedlockBuilder::max_ttl) plus drift ago may have restarted and forgotten
    /// locks that are still valid: do not [`provision`](Self::provision) it.
    ///
    /// # Errors
    ///
    /// Each master's own: per master, so that the reachable ones are still reported.
    ///
    /// # Cancel safety
    ///
    /// Read-only: cancelling it leaves nothing behind.
    pub async fn master_uptimes(&self) -> Vec<(String, Result<Duration, NodeError>)> {
        use crate::round::master::Master;
        let nodes = &self.shared.nodes;
        let results = futures::future::join_all(nodes.iter().map(|node| node.uptime())).await;
        nodes
            .iter()
            .zip(results)
            .map(|(node, result)| {
                let name = node.name().to_string();
                let result = result.map_err(|kind| NodeError::new(&name, kind));
                (name, result)
            })
            .collect()
    }

    /// The quarantine of restart protection: how long after a restart a master's votes do not
    /// count (the maximum TTL plus its drift allowance); `None` when the protection is off.
    pub fn restart_quarantine(&self) -> Option<Duration> {
        self.shared.config.quarantine()
    }

    /// One acquisition round, no retry: the lock if a quorum granted it in time.
    ///
    /// `SET NX PX` goes to every master at once; the round is decided as soon as a quorum
    /// granted or became impossible, so it takes about the round-trip time of the quorum-th
    /// fastest master and never more than the node timeout. The lock's validity is
    /// `ttl − elapsed − (ttl × drift_factor + 2 ms)`, measured on a monotonic clock from before
    /// the first request. TTLs have millisecond precision (sub-millisecond parts are dropped).
    ///
    /// # Errors
    ///
    /// * [`LockError::Contended`]: another owner holds it on too many masters;
    /// * [`LockError::QuorumUnreachable`]: too many masters failed, each listed with its error;
    /// * [`LockError::ValidityExhausted`]: the quorum came too late to leave any validity;
    /// * [`LockError::InvalidArgument`]: an empty resource, a TTL of zero, one that leaves no
    ///   validity after drift, or one beyond the maximum TTL
    ///   ([`limits::MAX_TTL`](crate::limits::MAX_TTL) or the manager's
    ///   [`max_ttl`](crate::RedlockBuilder::max_ttl)).
    ///
    /// On any error, the keys this round may have set are released in the background.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-flight releases, in the background, every key it may have set:
    /// requests not yet sent are never sent, requests already sent are followed by a
    /// compare-and-delete on the same connection, which the master runs after them.
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<LockGuard, LockError> {
        let (keys, terms) = self.validate(resource, ttl)?;
        Acquisition::new(&self.shared, resource, terms.ttl)
            .once(self.acquire_round(resource, &keys, terms, false))
            .await
    }

    /// Acquires with retries: up to [`retry_count`](RedlockBuilder::retry_count) more rounds
    /// after the first.
    ///
    /// With [notified hand-offs](RedlockBuilder::notified_handoffs) (the default), a refused
    /// acquisition subscribes to the resource's releases and tries again at once (that round,
    /// which closes the gap between the refusal and the subscription, is not counted as a
    /// retry); then each retry follows a release, the expiry of the holder's keys (when it
    /// crashed), or, for the first in line only, a random delay below
    /// [`retry_delay`](RedlockBuilder::retry_delay). Without them, each retry follows a random
    /// delay below the retry delay.
    ///
    /// # Errors
    ///
    /// The error of the last round (see [`try_lock`](Self::try_lock)) once the retries are
    /// spent; an argument error at once. Errors that retrying cannot fix are returned at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_lock`](Self::try_lock): dropping the future releases whatever the current
    /// round may have set, and leaves the resource's line of waiters (unsubscribing if it was
    /// the last; a release signalled to it goes to the next waiter).
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<LockGuard, LockError> {
        let patience = Patience::Retries(self.shared.config.retry_count);
        self.acquire(resource, ttl, patience).await
    }

    /// Acquires, retrying until `deadline` (a round in flight at the deadline is allowed to
    /// finish: rounds take at most the node timeout), woken by releases as
    /// [`lock`](Self::lock) is. A deadline more than about 30 years away is as good as none: it
    /// waits until the lock is granted.
    ///
    /// # Errors
    ///
    /// [`LockError::DeadlinePassed`], carrying the last round's error, once the deadline is
    /// reached without the lock (at once, without contacting any master, if it already passed);
    /// an argument error at once; errors that retrying cannot fix at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    pub async fn lock_until(
        &self,
        resource: &str,
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<LockGuard, LockError> {
        self.acquire(resource, ttl, Patience::until(deadline)).await
    }

    /// [`lock`](Self::lock) and [`lock_until`](Self::lock_until): rounds through the
    /// acquisition driver, in the resource's line, polling below the retry delay.
    async fn acquire(
        &self,
        resource: &str,
        ttl: Duration,
        patience: Patience,
    ) -> Result<LockGuard, LockError> {
        let (keys, terms) = self.validate(resource, ttl)?;
        let poll = PollDelay::below(self.shared.config.retry_delay);
        Acquisition::new(&self.shared, resource, terms.ttl)
            .retrying(patience, Line::One(&keys.lock), poll, |waiting| {
                self.acquire_round(resource, &keys, terms, waiting)
            })
            .await
    }

    /// One acquire round, plus the write-back of the fencing token when fencing is on and the
    /// granting masters did not all issue the same token.
    pub(crate) async fn acquire_round(
        &self,
        resource: &str,
        keys: &LockKeys,
        terms: RoundTerms,
        report_ttl: bool,
    ) -> Result<LockGuard, RoundFailure> {
        let mut grant =
            round::acquire_reporting(&self.shared.nodes, resource, keys, terms, report_ttl).await?;
        // A reentrant owner's acquisition while another of its guards is valid keeps that
        // hold's token, stored on a quorum already (see `reentrant_hold`): no write-back.
        let rejoined = match grant.token {
            Some(_) => (self.shared.reentrant_holds).rejoin(
                &keys.lock,
                &grant.ownership,
                grant.valid_until,
            ),
            None => None,
        };
        if rejoined.is_some() {
            grant.token = rejoined;
        }
        // A token a quorum of masters issued is already stored on a quorum: no write-back.
        let token = crate::fencing::pending_write_back(grant.token, grant.token_on_quorum, &terms)
            .filter(|_| rejoined.is_none());
        // From here the guard owns the keys: an error or a cancellation drops it, which
        // releases them.
        let mut guard = LockGuard::new(
            Arc::clone(&self.shared),
            resource.to_string(),
            Arc::clone(&keys.lock),
            terms.ttl,
            grant,
        );
        let (Some(fence_key), Some(token)) = (&keys.fence, token) else {
            return Ok(guard.into_reentrant_hold());
        };
        match guard.write_back_fence(fence_key, token, &terms).await {
            Ok(()) => Ok(guard.into_reentrant_hold()),
            Err(error) => Err(RoundFailure::of(error)),
        }
    }

    /// Checks the arguments and builds the keys; TTLs are truncated to whole milliseconds.
    fn validate(&self, resource: &str, ttl: Duration) -> Result<(LockKeys, RoundTerms), LockError> {
        let config = &self.shared.config;
        let keys = lock_keys(config, resource)?;
        let terms = round_terms(config, ttl)?;
        Ok((keys, terms))
    }
}
