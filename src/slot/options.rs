//! [`SlotOptions`]: how a slot is claimed, kept and remembered, and the checks that reject
//! nonsense before any master is asked.

use std::time::Duration;

use crate::defaults;
use crate::error::InvalidArgument;
use crate::lease::LeaseOptions;
use crate::limits;

/// How [`Slots::claim`](crate::Slots::claim) claims a slot: the running claim's
/// TTL (renewed by its lease), how long the slot's record is kept, whether a slot whose runner
/// died may be claimed again, and an optional minimum hold.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{LeaseOptions, SlotOptions};
///
/// // A nightly job: claims renewed every 10 s, records kept a week, retried if its runner dies,
/// // and never run for more than an hour.
/// let opts = SlotOptions::new()
///     .ttl(Duration::from_secs(30))
///     .retention(Duration::from_secs(7 * 24 * 3600))
///     .retry_abandoned(true)
///     .lease(LeaseOptions::new().max_hold(Duration::from_secs(3600)));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotOptions {
    pub(crate) ttl: Duration,
    pub(crate) retention: Duration,
    pub(crate) retry_abandoned: bool,
    pub(crate) lease: LeaseOptions,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) runner: Option<String>,
}

impl Default for SlotOptions {
    fn default() -> Self {
        Self {
            ttl: defaults::SLOT_TTL,
            retention: defaults::SLOT_RETENTION,
            retry_abandoned: false,
            lease: LeaseOptions::new(),
            hold_at_least: None,
            runner: None,
        }
    }
}

impl SlotOptions {
    /// Every option at its default: claim TTL 30 s, retention 24 h, at-most-once (a slot whose
    /// runner died is not claimed again), no minimum hold.
    pub fn new() -> Self {
        Self::default()
    }

    /// The TTL of the running claim (whole milliseconds): its lease renews it while the job runs,
    /// so it is also how long a slot stays "running" after its runner died before it counts as
    /// abandoned. Same limits as any lock TTL. Defaults to
    /// [`defaults::SLOT_TTL`](crate::defaults::SLOT_TTL) (30 s).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long the slot's record (claimed, completed, abandoned) is kept on the masters after its
    /// run ended: at least that long after its completion or abandonment was written (a
    /// completion never shortens the record, so it may stay until the claim TTL plus the
    /// retention after the last renewal), or, for a runner that died, after its claim ran out
    /// (one lease TTL after its last renewal). A host that fires this late
    /// after the run ended still sees "completed" (or "abandoned"): with workers whose clocks
    /// differ, longer than the time between the first claim of a slot and the last (skew plus how
    /// late a worker may start it). A run longer than the retention keeps the record alive with its
    /// claim (each renewal keeps it for the renewed TTL plus the retention), so a record never
    /// expires under a live run. At least the claim TTL and the [minimum
    /// hold](Self::hold_at_least), at most
    /// [`limits::MAX_SLOT_RETENTION`](crate::limits::MAX_SLOT_RETENTION). Defaults to
    /// [`defaults::SLOT_RETENTION`](crate::defaults::SLOT_RETENTION) (24 h).
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Whether a slot whose runner died (its claim expired without completion) or gave up
    /// ([`SlotRun::abandon`](crate::SlotRun::abandon)) may be claimed again: at-least-once
    /// instead of at-most-once. The new claim carries a higher fencing token on a fenced
    /// manager, so the job's side effects can tell the runs apart. Defaults to `false`.
    #[must_use]
    pub fn retry_abandoned(mut self, yes: bool) -> Self {
        self.retry_abandoned = yes;
        self
    }

    /// How the claim's lease renews it ([`LeaseOptions::max_hold`] caps a run; the lease's TTL
    /// defaults to the claim TTL). Defaults to [`LeaseOptions::new`].
    #[must_use]
    pub fn lease(mut self, opts: LeaseOptions) -> Self {
        self.lease = opts;
        self
    }

    /// Keeps the running claim until `d` after it was granted when the run completes or is
    /// abandoned sooner (as [`LockGuard::release_holding`](crate::LockGuard::release_holding)):
    /// with [`retry_abandoned`](Self::retry_abandoned), a run that failed fast is not retried
    /// before then. At most the manager's [`max_ttl`](crate::RedlockBuilder::max_ttl) and the
    /// [retention](Self::retention) (the record must outlive the claim). Defaults to none.
    #[must_use]
    pub fn hold_at_least(mut self, d: Duration) -> Self {
        self.hold_at_least = Some(d);
        self
    }

    /// The runner's name recorded with the slot (shown by [`Slots::status`](crate::Slots::status)
    /// and in [`SlotRecord`](crate::SlotRecord)). 1 to
    /// [`limits::MAX_SLOT_NAME`](crate::limits::MAX_SLOT_NAME) bytes (a longer name is refused when
    /// claiming: it would be stored with every record). Defaults to the host name and process id,
    /// `host:pid`.
    #[must_use]
    pub fn runner(mut self, name: impl Into<String>) -> Self {
        self.runner = Some(name.into());
        self
    }

    /// The lease options a claim's run keeps its slot with (its hold-at-least folded in),
    /// checked for `ttl` against the manager's settings, before any master is
    /// asked.
    pub(crate) fn lease_for(
        &self,
        config: &crate::config::Config,
        ttl: std::time::Duration,
    ) -> Result<crate::LeaseOptions, crate::LockError> {
        let lease_opts = match self.hold_at_least {
            Some(hold) => self.lease.hold_at_least(hold),
            None => self.lease,
        };
        let resolved = lease_opts.resolve(ttl)?;
        crate::lease::check_against(config, resolved)?;
        crate::lease::check_hold(config, lease_opts.hold())?;
        Ok(lease_opts)
    }

    /// The runner name to record.
    pub(crate) fn runner_name(&self) -> String {
        self.runner.clone().unwrap_or_else(default_runner)
    }

    /// Checks what does not need a manager: the retention, and the names.
    pub(crate) fn check(&self, job: &str, slot: &str) -> Result<(), InvalidArgument> {
        check_names(job, slot)?;
        if let Some(runner) = &self.runner {
            check_name("runner", runner)?;
        }
        if let Some(hold) = self.hold_at_least.filter(|hold| *hold > self.retention) {
            return Err(InvalidArgument::RetentionBelowHold {
                retention: self.retention,
                hold,
            });
        }
        if self.retention.is_zero() {
            return Err(InvalidArgument::ZeroRetention);
        }
        if self.retention > limits::MAX_SLOT_RETENTION || self.retention < self.ttl {
            return Err(InvalidArgument::Retention {
                retention: self.retention,
                ttl: self.ttl,
                max: limits::MAX_SLOT_RETENTION,
            });
        }
        Ok(())
    }
}

/// Checks a job and a slot name: not empty, not too long.
pub(crate) fn check_names(job: &str, slot: &str) -> Result<(), InvalidArgument> {
    check_name("job", job)?;
    check_name("slot", slot)
}

/// Checks one name (`what` says which): not empty, not too long.
fn check_name(what: &'static str, name: &str) -> Result<(), InvalidArgument> {
    if name.is_empty() || name.len() > limits::MAX_SLOT_NAME {
        return Err(InvalidArgument::SlotName {
            what,
            len: name.len(),
            max: limits::MAX_SLOT_NAME,
        });
    }
    Ok(())
}

/// `host:pid`: the host name from the kernel (or `$HOSTNAME`), `unknown-host` if neither says.
fn default_runner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_and_names_are_rejected() {
        let ok = SlotOptions::new();
        assert_eq!(ok.check("job", "slot"), Ok(()));
        assert!(matches!(
            ok.check("", "slot"),
            Err(InvalidArgument::SlotName { what: "job", .. })
        ));
        assert!(matches!(
            ok.check("job", ""),
            Err(InvalidArgument::SlotName { what: "slot", .. })
        ));
        let long = "x".repeat(limits::MAX_SLOT_NAME + 1);
        assert!(ok.check(&long, "slot").is_err());
        assert_eq!(
            SlotOptions::new().retention(Duration::ZERO).check("j", "s"),
            Err(InvalidArgument::ZeroRetention)
        );
        assert!(SlotOptions::new()
            .retention(Duration::MAX)
            .check("j", "s")
            .is_err());
        // Records must outlive the claim they describe.
        assert!(SlotOptions::new()
            .retention(Duration::from_secs(1))
            .check("j", "s")
            .is_err());
        let runner = ok.runner_name();
        assert!(
            runner.ends_with(&format!(":{}", std::process::id())),
            "{runner}"
        );
        assert_eq!(SlotOptions::new().runner("a").runner_name(), "a");
        for bad in [String::new(), "r".repeat(limits::MAX_SLOT_NAME + 1)] {
            assert!(matches!(
                SlotOptions::new().runner(bad).check("j", "s"),
                Err(InvalidArgument::SlotName { what: "runner", .. })
            ));
        }
        // The record must outlive a claim kept until a minimum hold.
        let held = SlotOptions::new()
            .ttl(Duration::from_secs(1))
            .retention(Duration::from_secs(2));
        assert!(held
            .clone()
            .hold_at_least(Duration::from_secs(2))
            .check("j", "s")
            .is_ok());
        assert_eq!(
            held.hold_at_least(Duration::from_secs(3)).check("j", "s"),
            Err(InvalidArgument::RetentionBelowHold {
                retention: Duration::from_secs(2),
                hold: Duration::from_secs(3)
            })
        );
    }
}
