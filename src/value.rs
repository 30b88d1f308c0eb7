//! Lock values: the random token that proves which owner set a key, and the claim a guard
//! holds (its value, and for a reentrant hold, which acquisition of the owner it is).

use std::fmt;
use std::sync::Arc;

/// 128 random bits from the operating system's CSPRNG (a v4 UUID), as 32 hex characters.
///
/// Never guessable, never reused: each acquisition attempt draws a fresh one, so the cleanup of
/// one attempt can never delete the key of a later attempt by the same client. Its `Debug` form
/// hides the value, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockValue(Arc<str>);

impl LockValue {
    pub(crate) fn random() -> Self {
        Self(Arc::from(uuid::Uuid::new_v4().simple().to_string()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockValue(***)")
    }
}

/// A reentrant owner's hold: the hash of live acquisitions next to the lock key, and this
/// acquisition's member in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reentry {
    pub(crate) holds_key: Arc<str>,
    pub(crate) acquisition: LockValue,
}

/// What proves a key is ours: the value it must hold (random per attempt, or the owner's
/// identity for a reentrant lock) and, for a reentrant lock, this acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) value: LockValue,
    pub(crate) reentry: Option<Reentry>,
}

impl Claim {
    /// A fresh claim: a new random value, or for `owner` its identity and a new acquisition.
    pub(crate) fn fresh(owner: Option<&LockValue>, holds_key: Option<&Arc<str>>) -> Self {
        match (owner, holds_key) {
            (Some(owner), Some(holds_key)) => Self {
                value: owner.clone(),
                reentry: Some(Reentry {
                    holds_key: Arc::clone(holds_key),
                    acquisition: LockValue::random(),
                }),
            },
            _ => Self {
                value: LockValue::random(),
                reentry: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_distinct_and_hidden_from_debug() {
        let a = LockValue::random();
        let b = LockValue::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(!format!("{a:?}").contains(a.as_str()));
    }
}
