//! [`RedlockBuilder`]: the settings of a lock manager, their defaults and their validation.

use std::collections::HashSet;
use std::time::Duration;

use crate::defaults;
use crate::error::ConfigError;
use crate::limits;
use crate::mutant::Mutant;
use crate::transport::address::NodeAddress;

/// The validated settings a [`Redlock`](crate::Redlock) runs with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) key_prefix: String,
    pub(crate) max_unanswered: usize,
    pub(crate) connections_per_node: usize,
    pub(crate) mutant: Option<Mutant>,
    pub(crate) fencing: bool,
    pub(crate) fence_retention: Duration,
    pub(crate) max_ttl: Duration,
    pub(crate) restart_protection: bool,
    /// Whether a restarted master with durable persistence counts at once
    /// ([`RedlockBuilder::trust_durable_restarts`]).
    pub(crate) trust_durable_restarts: bool,
    /// The owner of a reentrant handle ([`Redlock::reentrant`](crate::Redlock::reentrant)).
    pub(crate) owner: Option<crate::value::LockValue>,
    /// Whether waiting acquisitions are woken by releases ([`RedlockBuilder::notified_handoffs`]).
    pub(crate) notified: bool,
}

impl Config {
    /// How old a master's epoch marker must be before its votes count: the maximum TTL plus its
    /// drift allowance, so every lock it granted before a restart has expired by then.
    pub(crate) fn quarantine(&self) -> Option<Duration> {
        self.restart_protection.then(|| {
            self.max_ttl
                .saturating_add(crate::round::timing::drift(self.max_ttl, self.drift_factor))
        })
    }
}

/// Builds a [`Redlock`](crate::Redlock) manager. Created by
/// [`Redlock::builder`](crate::Redlock::builder).
///
/// Every setter documents its default. [`build`](Self::build) validates everything and never
/// connects: no node needs to be up at build time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let locks = quorumlock::Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .node_timeout(Duration::from_millis(20))
///     .build()?;
/// # Ok::<(), quorumlock::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    nodes: Vec<String>,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    retry_count: u32,
    retry_delay: Duration,
    key_prefix: String,
    max_unanswered: usize,
    connections_per_node: usize,
    mutant: Option<Mutant>,
    fencing: bool,
    fence_retention: Duration,
    max_ttl: Option<Duration>,
    restart_protection: bool,
    trust_durable_restarts: bool,
    notified: bool,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            nodes: Vec::new(),
            node_timeout: defaults::NODE_TIMEOUT,
            connect_timeout: defaults::CONNECT_TIMEOUT,
            drift_factor: defaults::DRIFT_FACTOR,
            retry_count: defaults::RETRY_COUNT,
            retry_delay: defaults::RETRY_DELAY,
            key_prefix: defaults::KEY_PREFIX.to_string(),
            max_unanswered: defaults::MAX_UNANSWERED,
            connections_per_node: defaults::CONNECTIONS_PER_NODE,
            mutant: None,
            fencing: false,
            fence_retention: defaults::FENCE_RETENTION,
            max_ttl: None,
            restart_protection: false,
            trust_durable_restarts: false,
            notified: true,
        }
    }
}

impl RedlockBuilder {
    /// Adds one master by URL: `redis://[user:password@]host:port[/db]` or
    /// `redis+unix:///path[?db=N&user=U&pass=P]`, or `rediss://...` for TLS with the `tls`
    /// feature (TLS 1.3 through rustls, trusting the system's roots; `SSL_CERT_FILE` points at
    /// another bundle). A password is percent-decoded (write a `@` in it as `%40`).
    /// The masters must be independent (no replication between them). No nodes by default.
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(url.into());
        self
    }

    /// Adds several masters by URL; see [`node`](Self::node). No nodes by default.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// How long one request to one master may take before that master's vote counts as a
    /// failure. Keep it small against the TTL: a slow or paused master then costs at most this
    /// much, and only when it is needed for the quorum. Must not be zero; anything beyond about
    /// 30 years (`Duration::MAX`, say) means no timeout. Defaults to 50 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How long opening a connection to a master may take. Connections are opened lazily, in the
    /// background, and kept; a request waits for a connection at most its node timeout.
    /// Must not be zero; anything beyond about 30 years (`Duration::MAX`, say) means no
    /// timeout. Defaults to 1 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The clock-drift allowance as a fraction of the TTL; the drift taken off every validity is
    /// `ttl × factor + 2 ms`. Must lie in `[0, 1)`. Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// How many times [`Redlock::lock`](crate::Redlock::lock) retries after a failed first round
    /// (so it runs at most `retry_count + 1` rounds). Defaults to 3.
    pub fn retry_count(mut self, count: u32) -> Self {
        self.retry_count = count;
        self
    }

    /// The upper bound of the random delay before each retry (uniform in `[0, delay)`), which
    /// keeps competing clients from retrying in lockstep. Zero retries at once; a delay is
    /// never longer than about 30 years, whatever the bound. Defaults to 200 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The prefix of every lock key: resource `job:42` lives at key `<prefix>job:42`.
    /// Defaults to `"quorumlock:"`.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.key_prefix = prefix.to_string();
        self
    }

    /// How many requests on one connection to a master may be abandoned unanswered (timed out,
    /// or no longer needed once the quorum was decided) before no more lock requests are queued
    /// behind them. A paused master would otherwise collect requests that all run when it
    /// resumes. The connection is probed in the background and used again as soon as it
    /// answers. Defaults to 512.
    pub fn max_unanswered(mut self, max: usize) -> Self {
        self.max_unanswered = max;
        self
    }

    /// How many connections each master gets (1 to 64). A resource always uses the same one
    /// (chosen by a hash of its key), so a cleanup still runs after the late request it
    /// cleans up; spreading resources over more than one lets the client prepare one batch of
    /// requests while the master answers another, which raises throughput under many
    /// concurrent locks. Defaults to 2.
    pub fn connections_per_node(mut self, connections: usize) -> Self {
        self.connections_per_node = connections;
        self
    }

    /// How long a resource's fence counter is kept on a master after its last use, so that unused
    /// resources cost no memory. A counter that expired (or was lost in a restart) does not make
    /// tokens go backwards: tokens are also floored by the master's clock in microseconds, so they
    /// stay monotonic as long as master clocks never step backwards and agree to within the
    /// retention. Keep it well above the longest time a lock is held, extensions included. It is
    /// sent to the masters as a TTL: at most [`limits::MAX_TTL`](crate::limits::MAX_TTL), and not
    /// zero. Defaults to 24 hours.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// The longest TTL this manager accepts (for acquire and extend); longer ones are rejected with
    /// [`InvalidArgument::TtlTooLong`](crate::InvalidArgument::TtlTooLong). Restart protection
    /// keeps a restarted master out of quorums for this long. From 1 ms up to
    /// [`limits::MAX_TTL`](crate::limits::MAX_TTL). Defaults to
    /// [`limits::MAX_TTL`](crate::limits::MAX_TTL) (no limit below what Redis accepts).
    pub fn max_ttl(mut self, max: Duration) -> Self {
        self.max_ttl = Some(max);
        self
    }

    /// Client-enforced delayed restarts: a master that restarted (a new `redis-server` process,
    /// whatever data it reloaded: none, an RDB snapshot or an AOF older than its last grants)
    /// or lost its data (its epoch marker is missing, so a new one is created) does not count
    /// towards a quorum until [`max_ttl`](Self::max_ttl) plus drift has passed since, so every
    /// lock it may have forgotten has expired. Each connection reads the master's `run_id` and
    /// uptime when it opens (a restart breaks every connection) and the marker check rides
    /// inside the acquire script: no extra round trip per lock.
    ///
    /// Availability cost: a restarted master is unusable for one max TTL, and a **brand-new
    /// deployment looks exactly like that**: call [`Redlock::provision`](crate::Redlock::provision)
    /// once on masters known to be fresh (it vouches for their current processes). This holds
    /// whatever the masters' persistence: a master with `appendfsync always` that was restored
    /// from a backup is indistinguishable from one that merely restarted, so it is quarantined
    /// too (see [`trust_durable_restarts`](Self::trust_durable_restarts) to trade that away).
    /// Requires [`max_ttl`](Self::max_ttl). Defaults to `false`.
    pub fn restart_protection(mut self, on: bool) -> Self {
        self.restart_protection = on;
        self
    }

    /// **Weakens restart protection**: a restarted master whose persistence cannot lose an
    /// acknowledged write (`appendonly yes` and `appendfsync always`, read with `CONFIG GET`;
    /// where `CONFIG` is refused the master is not trusted) counts at once instead of sitting
    /// out one max TTL.
    ///
    /// Sound only if no such master is ever brought back with data older than what it
    /// acknowledged. **A master restored from a backup (an AOF or RDB copy taken earlier) then
    /// breaks mutual exclusion**: it reloads an old epoch marker, has forgotten the locks it
    /// granted since the backup, and votes at once, so a second client can gather a quorum
    /// while the first still holds the lock. The same goes for a disk or volume snapshot rolled
    /// back, or a data directory copied from another master. With this setting on, an operator
    /// who restores a master must keep it out of service (unreachable to clients) for at least
    /// the max TTL after it starts, or wait one max TTL with no lock held before calling
    /// [`Redlock::provision`](crate::Redlock::provision); never restore a backup into a running
    /// deployment otherwise. Leave it off unless a restarted master's quarantine costs more than
    /// that discipline. Requires [`restart_protection`](Self::restart_protection). Defaults to
    /// `false`.
    pub fn trust_durable_restarts(mut self, on: bool) -> Self {
        self.trust_durable_restarts = on;
        self
    }

    /// Notified hand-offs: a [`lock`](crate::Redlock::lock) or
    /// [`lock_until`](crate::Redlock::lock_until) that finds the lock taken waits for its
    /// release (each master publishes it) instead of polling, and for its expiry when the
    /// holder crashed (a refusal says how long its key has left). Each manager opens one
    /// pub/sub connection per master when its first waiter arrives, shared by all of them;
    /// a release wakes one waiter of the manager (the longest waiting), and only the first in
    /// line still polls, every [`retry_delay`](Self::retry_delay) at most, so a lost
    /// notification costs at most one retry delay. `false` polls as before: every waiter
    /// retries after a random delay below the retry delay. Defaults to `true`.
    pub fn notified_handoffs(mut self, on: bool) -> Self {
        self.notified = on;
        self
    }

    /// Breaks the algorithm on purpose, for the jepsen-lite harness. Never use this.
    #[cfg(quorumlock_mutants)]
    #[doc(hidden)]
    pub fn mutant(mut self, mutant: Mutant) -> Self {
        self.mutant = Some(mutant);
        self
    }

    /// Validates every setting: the [`Config`] and the parsed node addresses that
    /// [`build`](Self::build) makes the manager from.
    pub(crate) fn validate(self) -> Result<(Config, Vec<NodeAddress>), ConfigError> {
        if self.nodes.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::DriftFactor(self.drift_factor));
        }
        if self.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout);
        }
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroConnectTimeout);
        }
        if self.max_unanswered == 0 {
            return Err(ConfigError::ZeroMaxUnanswered);
        }
        if !(1..=limits::MAX_CONNECTIONS_PER_NODE).contains(&self.connections_per_node) {
            return Err(ConfigError::ConnectionsPerNode(self.connections_per_node));
        }
        if self.fence_retention.is_zero() {
            return Err(ConfigError::ZeroFenceRetention);
        }
        if self.fence_retention > limits::MAX_TTL {
            return Err(ConfigError::FenceRetentionTooLong(self.fence_retention));
        }
        let max_ttl = match self.max_ttl {
            Some(max) if max.as_millis() == 0 || max > limits::MAX_TTL => {
                return Err(ConfigError::MaxTtl(max));
            }
            Some(max) => max,
            None if self.restart_protection => {
                return Err(ConfigError::RestartProtectionWithoutMaxTtl);
            }
            None => limits::MAX_TTL,
        };
        if self.trust_durable_restarts && !self.restart_protection {
            return Err(ConfigError::TrustDurableRestartsWithoutProtection);
        }
        let mut seen = HashSet::new();
        let mut addresses = Vec::with_capacity(self.nodes.len());
        for url in &self.nodes {
            let address = NodeAddress::parse(url)?;
            if !seen.insert(address.identity.clone()) {
                return Err(ConfigError::DuplicateNode {
                    url: address.display,
                });
            }
            addresses.push(address);
        }
        let config = Config {
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift_factor: self.drift_factor,
            retry_count: self.retry_count,
            retry_delay: self.retry_delay,
            key_prefix: self.key_prefix,
            max_unanswered: self.max_unanswered,
            connections_per_node: self.connections_per_node,
            mutant: self.mutant,
            fencing: self.fencing,
            fence_retention: self.fence_retention,
            max_ttl,
            restart_protection: self.restart_protection,
            trust_durable_restarts: self.trust_durable_restarts,
            owner: None,
            notified: self.notified,
        };
        Ok((config, addresses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> RedlockBuilder {
        RedlockBuilder::default().nodes([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
    }

    #[test]
    fn builds_without_any_node_up() {
        assert!(three().build().is_ok());
    }

    #[test]
    fn rejects_bad_configurations() {
        assert_eq!(
            RedlockBuilder::default().build().err(),
            Some(ConfigError::NoNodes)
        );
        assert_eq!(
            three().drift_factor(1.0).build().err(),
            Some(ConfigError::DriftFactor(1.0))
        );
        assert_eq!(
            three().drift_factor(-0.1).build().err(),
            Some(ConfigError::DriftFactor(-0.1))
        );
        assert!(matches!(
            three().drift_factor(f64::NAN).build().err(),
            Some(ConfigError::DriftFactor(_))
        ));
        assert_eq!(
            three().node_timeout(Duration::ZERO).build().err(),
            Some(ConfigError::ZeroNodeTimeout)
        );
        assert_eq!(
            three().connect_timeout(Duration::ZERO).build().err(),
            Some(ConfigError::ZeroConnectTimeout)
        );
        assert_eq!(
            three().max_unanswered(0).build().err(),
            Some(ConfigError::ZeroMaxUnanswered)
        );
        for bad in [0, limits::MAX_CONNECTIONS_PER_NODE + 1] {
            assert_eq!(
                three().connections_per_node(bad).build().err(),
                Some(ConfigError::ConnectionsPerNode(bad))
            );
        }
        assert!(three().connections_per_node(1).build().is_ok());
        assert_eq!(
            three().node("redis://u:pw@127.0.0.1:2/4").build().err(),
            Some(ConfigError::DuplicateNode {
                url: "redis://u:***@127.0.0.1:2/4".into()
            })
        );
        assert!(matches!(
            three().node("localhost").build().err(),
            Some(ConfigError::InvalidUrl { .. })
        ));
    }

    #[test]
    fn durations_beyond_what_redis_accepts_are_refused_naming_the_setting_and_its_bound() {
        let too_long = limits::MAX_TTL + Duration::from_millis(1);
        let error = three().fence_retention(too_long).build().err();
        assert_eq!(error, Some(ConfigError::FenceRetentionTooLong(too_long)));
        let text = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.starts_with("fence_retention must be at most "),
            "{text}"
        );
        assert!(text.contains(&format!("{:?}", limits::MAX_TTL)), "{text}");
        assert!(text.ends_with(&format!("got {too_long:?}")), "{text}");
        assert!(three().fence_retention(limits::MAX_TTL).build().is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_nanos(999_999),
            too_long,
            Duration::MAX,
        ] {
            let error = three().max_ttl(bad).build().err();
            assert_eq!(error, Some(ConfigError::MaxTtl(bad)));
            let text = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(
                text.starts_with("max_ttl must be from 1ms up to "),
                "{text}"
            );
        }
    }

    #[test]
    fn timeouts_and_delays_too_long_for_the_clock_saturate() {
        for huge in [Duration::from_millis(u64::MAX), Duration::MAX] {
            assert!(three().node_timeout(huge).build().is_ok());
            assert!(three().connect_timeout(huge).build().is_ok());
            assert!(three().retry_delay(huge).build().is_ok());
        }
        assert!(three().retry_delay(Duration::ZERO).build().is_ok());
    }

    #[test]
    fn messages_name_the_setter_and_say_what_was_expected() {
        let errors = [
            ConfigError::DriftFactor(1.5),
            ConfigError::ZeroNodeTimeout,
            ConfigError::ZeroConnectTimeout,
            ConfigError::ZeroFenceRetention,
            ConfigError::FenceRetentionTooLong(Duration::MAX),
            ConfigError::MaxTtl(Duration::ZERO),
            ConfigError::ZeroMaxUnanswered,
            ConfigError::ConnectionsPerNode(0),
        ];
        let setters = [
            "drift_factor",
            "node_timeout",
            "connect_timeout",
            "fence_retention",
            "fence_retention",
            "max_ttl",
            "max_unanswered",
            "connections_per_node",
        ];
        for (error, setter) in errors.iter().zip(setters) {
            let text = error.to_string();
            assert!(text.starts_with(setter), "{text}");
            assert!(
                text.contains("expected") || text.contains("must be"),
                "{text}"
            );
            assert!(!text.ends_with('.'), "{text}");
        }
    }
}
