//! [`LeaseOptions`]: how a lease renews its lock, and the checks that reject nonsense.

use std::time::Duration;

use crate::error::InvalidArgument;

/// How a [`Lease`](crate::Lease) keeps its lock alive: the TTL each renewal sets, how often it
/// renews, a cap on the total hold time, and whether
/// [`run_exclusive`](crate::Redlock::run_exclusive) cancels the work when the lock is lost.
///
/// Options are checked when they are used ([`LockGuard::keep_alive`](crate::LockGuard::keep_alive),
/// `run_exclusive`), since the default TTL comes from the guard.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::LeaseOptions;
///
/// // Renew a 10 s lock every 2 s, for at most an hour.
/// let opts = LeaseOptions::new()
///     .ttl(Duration::from_secs(10))
///     .renew_every(Duration::from_secs(2))
///     .max_hold(Duration::from_secs(3600));
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseOptions {
    ttl: Option<Duration>,
    renew_every: Option<Duration>,
    max_hold: Option<Duration>,
    safety_margin: Option<Duration>,
    cancel_on_loss: bool,
    hold_at_least: Option<Duration>,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            ttl: None,
            renew_every: None,
            max_hold: None,
            safety_margin: None,
            cancel_on_loss: true,
            hold_at_least: None,
        }
    }
}

/// Options with every default filled in, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Whole milliseconds, like every TTL sent to a master.
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) safety_margin: Duration,
}

impl LeaseOptions {
    /// Every option at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The TTL each renewal sets on the masters (truncated to whole milliseconds). The lock
    /// outlives a crashed holder by at most this much. At least 1 ms, longer than its drift
    /// allowance, and at most the manager's [`max_ttl`](crate::RedlockBuilder::max_ttl)
    /// ([`limits::MAX_TTL`](crate::limits::MAX_TTL) by default), as for any lock. Defaults to the
    /// guard's current [`ttl`](crate::LockGuard::ttl) for
    /// [`keep_alive`](crate::LockGuard::keep_alive), and to
    /// [`defaults::LEASE_TTL`](crate::defaults::LEASE_TTL) (30 s) for
    /// [`run_exclusive`](crate::Redlock::run_exclusive).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The time between renewals: a renewal starts this long after the round that gave the
    /// current validity started, but never later than one node timeout before that validity
    /// ends (so a renewal always has time to finish). A failed renewal is retried about every
    /// node timeout while validity remains. Must be shorter than the TTL. Defaults to a third of
    /// the TTL.
    #[must_use]
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// A hard cap on the total hold time, measured from the start of the round that gave the
    /// guard its validity (its acquisition, unless it was extended by hand before
    /// `keep_alive`). When it is reached, renewal stops and the holder is told
    /// ([`lost`](crate::Lease::lost) resolves with
    /// [`NotHeldReason::MaxHoldReached`](crate::NotHeldReason::MaxHoldReached)); the lock then
    /// stays valid, unrenewed, until its current validity ends, which gives the holder at most
    /// one TTL to wrap up. Must be at least the TTL; a cap too far away for the clock
    /// (`Duration::MAX`, say) is no cap. Defaults to no cap.
    #[must_use]
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// How long before the end of the lock's validity the lease stops counting as held:
    /// [`is_held`](crate::LeaseHandle::is_held) turns false, [`lost`](crate::LeaseHandle::lost)
    /// resolves (with [`NotHeldReason::Expired`](crate::NotHeldReason::Expired) when no renewal
    /// succeeded in time), and [`run_exclusive`](crate::Redlock::run_exclusive) starts
    /// cancelling the work `safety_margin` before
    /// [`valid_until`](crate::LeaseHandle::valid_until), not at it. Renewals are scheduled to
    /// finish before that earlier end.
    ///
    /// Timers fire at their deadline or later (tokio rounds up to the millisecond, and a busy
    /// runtime polls the woken task later still), and cancelled work stops only at its next
    /// `.await`: without a margin, the holder learns of the end of validity when the lock may
    /// already be someone else's. The margin absorbs those delays; it does not make pauses of
    /// the process harmless (only fencing tokens do). Must be shorter than the TTL minus its
    /// drift allowance.
    ///
    /// Defaults to a twentieth of the TTL, at most 50 ms: tens of milliseconds cover timer
    /// rounding and the scheduling delays of a loaded runtime, a long TTL gives up no more than
    /// that, and a short one keeps 95 % of its validity (600 ms → 30 ms, 30 s → 50 ms).
    #[must_use]
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Whether [`run_exclusive`](crate::Redlock::run_exclusive) cancels the work (drops its
    /// future) as soon as the lease is lost. With `false` the work always runs to completion
    /// and must watch its [`LeaseHandle`](crate::LeaseHandle) itself. Has no effect on
    /// [`keep_alive`](crate::LockGuard::keep_alive). Defaults to `true`.
    #[must_use]
    pub fn cancel_on_loss(mut self, cancel: bool) -> Self {
        self.cancel_on_loss = cancel;
        self
    }

    /// Keeps the lock on the masters until `d` after its grant when the lease releases it
    /// sooner ([`Lease::release`](crate::Lease::release), a dropped lease, the end of
    /// [`run_exclusive`](crate::Redlock::run_exclusive)), as
    /// [`LockGuard::release_holding`](crate::LockGuard::release_holding) does: a job that
    /// finishes early still keeps others out until then. At most the manager's
    /// [`max_ttl`](crate::RedlockBuilder::max_ttl). Defaults to none (a release deletes the
    /// lock at once).
    #[must_use]
    pub fn hold_at_least(mut self, d: Duration) -> Self {
        self.hold_at_least = Some(d);
        self
    }

    /// The minimum hold, if any.
    pub(crate) fn hold(&self) -> Option<Duration> {
        self.hold_at_least
    }

    pub(crate) fn cancels_on_loss(&self) -> bool {
        self.cancel_on_loss
    }

    /// The TTL these options renew with, given the default for the call.
    pub(crate) fn ttl_or(&self, default: Duration) -> Duration {
        self.ttl.unwrap_or(default)
    }

    /// Fills in the defaults and checks what can be checked without a manager: the TTL is at
    /// least 1 ms, renewals come more often than the TTL, the cap is at least one TTL, and the
    /// safety margin is shorter than the TTL. (The TTL's drift and maximum, and the margin
    /// against the TTL minus drift, are checked against the manager by the caller.)
    pub(crate) fn resolve(&self, default_ttl: Duration) -> Result<Resolved, InvalidArgument> {
        let asked = self.ttl_or(default_ttl);
        let ttl = Duration::from_millis(u64::try_from(asked.as_millis()).unwrap_or(u64::MAX));
        if ttl.is_zero() {
            return Err(InvalidArgument::ZeroTtl(asked));
        }
        let renew_every = self.renew_every.unwrap_or(ttl / 3);
        if renew_every.is_zero() {
            return Err(InvalidArgument::ZeroRenewInterval);
        }
        if renew_every >= ttl {
            return Err(InvalidArgument::RenewIntervalTooLong { renew_every, ttl });
        }
        if let Some(max_hold) = self.max_hold {
            if max_hold < ttl {
                return Err(InvalidArgument::MaxHoldTooShort { max_hold, ttl });
            }
        }
        let safety_margin = self.safety_margin.unwrap_or_else(|| default_margin(ttl));
        if safety_margin >= ttl {
            return Err(InvalidArgument::SafetyMarginTooLong { safety_margin, ttl });
        }
        Ok(Resolved {
            ttl,
            renew_every,
            max_hold: self.max_hold,
            safety_margin,
        })
    }
}

/// The default [`LeaseOptions::safety_margin`] for `ttl`: a twentieth of it, at most 50 ms.
fn default_margin(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn defaults_renew_at_a_third_of_the_ttl_without_a_cap() {
        let resolved = LeaseOptions::new().resolve(600 * MS).expect("valid");
        assert_eq!(
            resolved,
            Resolved {
                ttl: 600 * MS,
                renew_every: 200 * MS,
                max_hold: None,
                safety_margin: 30 * MS,
            }
        );
        assert!(LeaseOptions::default().cancels_on_loss());
        assert!(!LeaseOptions::new().cancel_on_loss(false).cancels_on_loss());
    }

    #[test]
    fn explicit_ttl_wins_and_is_truncated_to_milliseconds() {
        let resolved = LeaseOptions::new()
            .ttl(Duration::from_micros(900_700))
            .resolve(600 * MS)
            .expect("valid");
        assert_eq!(resolved.ttl, 900 * MS);
        assert_eq!(resolved.renew_every, 300 * MS);
    }

    #[test]
    fn rejects_zero_intervals_slow_renewals_and_short_caps() {
        let opts = LeaseOptions::new();
        assert_eq!(
            opts.resolve(Duration::from_micros(999)),
            Err(InvalidArgument::ZeroTtl(Duration::from_micros(999)))
        );
        assert_eq!(
            opts.renew_every(Duration::ZERO).resolve(600 * MS),
            Err(InvalidArgument::ZeroRenewInterval)
        );
        assert_eq!(
            opts.renew_every(600 * MS).resolve(600 * MS),
            Err(InvalidArgument::RenewIntervalTooLong {
                renew_every: 600 * MS,
                ttl: 600 * MS
            })
        );
        assert_eq!(
            opts.max_hold(599 * MS).resolve(600 * MS),
            Err(InvalidArgument::MaxHoldTooShort {
                max_hold: 599 * MS,
                ttl: 600 * MS
            })
        );
        assert!(matches!(
            opts.max_hold(Duration::ZERO).resolve(600 * MS),
            Err(InvalidArgument::MaxHoldTooShort { .. })
        ));
        assert!(opts.max_hold(600 * MS).resolve(600 * MS).is_ok());
        assert!(opts.renew_every(599 * MS).resolve(600 * MS).is_ok());
        // A zero TTL is reported as such, not as a renewal interval that is too long.
        assert!(matches!(
            opts.renew_every(MS).resolve(Duration::ZERO),
            Err(InvalidArgument::ZeroTtl(_))
        ));
    }

    #[test]
    fn safety_margin_defaults_to_a_twentieth_of_the_ttl_at_most_50_ms() {
        let margin = |ttl| {
            LeaseOptions::new()
                .resolve(ttl)
                .expect("valid")
                .safety_margin
        };
        assert_eq!(margin(600 * MS), 30 * MS);
        assert_eq!(margin(Duration::from_secs(30)), 50 * MS);
        assert_eq!(margin(Duration::from_secs(3600)), 50 * MS);
        // Never zero, never the whole TTL, however short.
        assert_eq!(margin(MS), Duration::from_micros(50));
        let explicit = LeaseOptions::new().safety_margin(5 * MS).resolve(600 * MS);
        assert_eq!(explicit.expect("valid").safety_margin, 5 * MS);
    }

    #[test]
    fn rejects_a_safety_margin_not_shorter_than_the_ttl() {
        let opts = LeaseOptions::new().safety_margin(600 * MS);
        let error = opts.resolve(600 * MS).expect_err("margin = ttl");
        assert_eq!(
            error,
            InvalidArgument::SafetyMarginTooLong {
                safety_margin: 600 * MS,
                ttl: 600 * MS
            }
        );
        assert!(error.to_string().contains("safety margin"), "{error}");
        assert!(opts.resolve(601 * MS).is_ok());
    }

    #[test]
    fn messages_say_what_was_expected() {
        let text = InvalidArgument::RenewIntervalTooLong {
            renew_every: 600 * MS,
            ttl: 600 * MS,
        }
        .to_string();
        assert!(text.starts_with("lease renewal interval 600ms"), "{text}");
        assert!(text.contains("expected"), "{text}");
        assert!(!text.ends_with('.'));
    }
}
