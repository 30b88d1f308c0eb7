//! The terms of one acquire or extend round: its TTL, drift, quorum, quarantine, fencing limits
//! and (for jepsen-lite only) its mutant.

use std::time::Duration;

use crate::config::Config;
use crate::error::InvalidArgument;
use crate::mutant::Mutant;
use crate::round::timing::{drift, quorum, validity};

/// The settings of one acquire or extend round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundTerms {
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    /// With restart protection: how old a master's epoch marker must be for its vote to count.
    pub(crate) quarantine: Option<Duration>,
    /// How long an idle fence counter is kept.
    pub(crate) fence_retention: Duration,
    /// How far ahead of the client's wall clock its proposed fencing token is, when not
    /// [`FENCE_LEAD`](crate::fencing::FENCE_LEAD) (tests only).
    pub(crate) fence_lead: Option<Duration>,
    /// A deliberately broken rule, for the jepsen-lite harness only.
    pub(crate) mutant: Option<Mutant>,
}

impl RoundTerms {
    /// A round with the plain algorithm: no restart protection, no mutation.
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Self {
        Self {
            ttl,
            drift_factor,
            quarantine: None,
            fence_retention: Duration::from_secs(24 * 60 * 60),
            fence_lead: None,
            mutant: None,
        }
    }

    /// The drift allowance of this round's TTL.
    pub(crate) fn drift(&self) -> Duration {
        match self.mutant {
            Some(Mutant::ZeroDrift) => Duration::ZERO,
            _ => drift(self.ttl, self.drift_factor),
        }
    }

    /// The yes votes that win among `n` masters.
    pub(crate) fn quorum(&self, n: usize) -> usize {
        match self.mutant {
            Some(Mutant::MinorityQuorum) => (n / 2).max(1),
            _ => quorum(n),
        }
    }

    /// Whether this round runs mutant `m` (jepsen-lite only; never true in a normal build).
    pub(crate) fn mutant(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The time a round took, as the validity computation sees it.
    pub(crate) fn counted(&self, elapsed: Duration) -> Duration {
        match self.mutant {
            Some(Mutant::NoElapsedCheck) => Duration::ZERO,
            _ => elapsed,
        }
    }
}

/// The settings of a round of `ttl` under `config` (also used by extend).
pub(crate) fn round_terms(config: &Config, ttl: Duration) -> Result<RoundTerms, InvalidArgument> {
    let mut terms = validate_ttl(ttl, config.drift_factor, config.max_ttl)?;
    terms.quarantine = config.quarantine();
    terms.fence_retention = config.fence_retention;
    terms.mutant = config.mutant;
    Ok(terms)
}

/// Validates a TTL: whole milliseconds, at least one, at most `max`, and longer than its drift
/// allowance.
pub(crate) fn validate_ttl(
    ttl: Duration,
    drift_factor: f64,
    max: Duration,
) -> Result<RoundTerms, InvalidArgument> {
    if ttl > max {
        return Err(InvalidArgument::TtlTooLong { ttl, max });
    }
    let whole = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    if whole.is_zero() {
        return Err(InvalidArgument::ZeroTtl(ttl));
    }
    let drift = drift(whole, drift_factor);
    if validity(whole, Duration::ZERO, drift).is_none() {
        return Err(InvalidArgument::TtlTooShort { ttl: whole, drift });
    }
    Ok(RoundTerms::new(whole, drift_factor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits;

    #[test]
    fn ttl_validation() {
        assert_eq!(
            validate_ttl(Duration::ZERO, 0.01, limits::MAX_TTL).err(),
            Some(InvalidArgument::ZeroTtl(Duration::ZERO))
        );
        assert_eq!(
            validate_ttl(Duration::from_micros(900), 0.01, limits::MAX_TTL).err(),
            Some(InvalidArgument::ZeroTtl(Duration::from_micros(900)))
        );
        assert!(matches!(
            validate_ttl(Duration::from_millis(2), 0.01, limits::MAX_TTL),
            Err(InvalidArgument::TtlTooShort { .. })
        ));
        assert!(matches!(
            validate_ttl(Duration::MAX, 0.01, limits::MAX_TTL),
            Err(InvalidArgument::TtlTooLong { .. })
        ));
        let terms =
            validate_ttl(Duration::from_micros(10_500), 0.01, limits::MAX_TTL).expect("valid");
        assert_eq!(terms.ttl, Duration::from_millis(10));
        assert!(validate_ttl(limits::MAX_TTL, 0.5, limits::MAX_TTL).is_ok());
    }
}
