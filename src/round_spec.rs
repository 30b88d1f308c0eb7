//! The settings of one acquire or extend round.

use std::time::Duration;

use crate::mutation::Mutation;
use crate::timing::{drift, quorum};

/// The settings of one acquire or extend round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundTiming {
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    /// With restart protection: how old a master's epoch marker must be for its vote to count.
    pub(crate) quarantine: Option<Duration>,
    /// How long an idle fence counter is kept.
    pub(crate) fence_retention: Duration,
    /// A deliberately broken rule, for the jepsen-lite harness only.
    pub(crate) mutation: Option<Mutation>,
}

impl RoundTiming {
    /// A round with the plain algorithm: no restart protection, no mutation.
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Self {
        Self {
            ttl,
            drift_factor,
            quarantine: None,
            fence_retention: Duration::from_secs(24 * 60 * 60),
            mutation: None,
        }
    }

    /// The drift allowance of this round's TTL.
    pub(crate) fn drift(&self) -> Duration {
        match self.mutation {
            Some(Mutation::ZeroDrift) => Duration::ZERO,
            _ => drift(self.ttl, self.drift_factor),
        }
    }

    /// The yes votes that win among `n` masters.
    pub(crate) fn quorum(&self, n: usize) -> usize {
        match self.mutation {
            Some(Mutation::MinorityQuorum) => (n / 2).max(1),
            _ => quorum(n),
        }
    }

    /// The time a round took, as the validity computation sees it.
    pub(crate) fn counted(&self, elapsed: Duration) -> Duration {
        match self.mutation {
            Some(Mutation::NoElapsedCheck) => Duration::ZERO,
            _ => elapsed,
        }
    }
}
