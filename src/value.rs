//! Lock values: the random token that proves which owner set a key, and the ownership a guard
//! holds (its value, and for a reentrant hold, which acquisition of the owner it is).

use std::fmt;
use std::sync::Arc;

/// A v4 UUID (122 random bits from the operating system's CSPRNG), as 32 hex characters.
/// Straight from the OS, not a user-space generator: a process that forks cannot hand its
/// child the same stream of values.
///
/// Never guessable, never reused: each acquisition attempt draws a fresh one, so the cleanup of
/// one attempt can never delete the key of a later attempt by the same client. Its `Debug` form
/// hides the value, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockValue(Arc<str>);

impl LockValue {
    pub(crate) fn random() -> Self {
        let mut text = [0u8; uuid::fmt::Simple::LENGTH];
        Self(Arc::from(
            &*uuid::Builder::from_random_bytes(crate::outside::random_bytes())
                .into_uuid()
                .simple()
                .encode_lower(&mut text),
        ))
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

/// A key that must live at least as long as the lock key it goes with: each extension of the
/// lock raises its TTL to at least `keep`, in the same script (a slot's record, which must
/// outlive every run of the slot: see `crate::slot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Companion {
    pub(crate) key: Arc<str>,
    pub(crate) keep: std::time::Duration,
}

/// What proves a key is ours: the value it must hold (random per attempt, or the owner's
/// identity for a reentrant lock) and, for a reentrant lock, this acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ownership {
    pub(crate) value: LockValue,
    pub(crate) reentry: Option<Reentry>,
    /// A key kept alive with the lock key (never with a reentry).
    pub(crate) companion: Option<Companion>,
}

impl Ownership {
    /// A fresh ownership: a new random value, or for `owner` its identity and a new acquisition.
    pub(crate) fn fresh(owner: Option<&LockValue>, holds_key: Option<&Arc<str>>) -> Self {
        match (owner, holds_key) {
            (Some(owner), Some(holds_key)) => Self {
                value: owner.clone(),
                reentry: Some(Reentry {
                    holds_key: Arc::clone(holds_key),
                    acquisition: LockValue::random(),
                }),
                companion: None,
            },
            _ => Self {
                value: LockValue::random(),
                reentry: None,
                companion: None,
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
        assert!(a.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        // Every digit but the UUID's version (12) and variant (16) is random: over many values
        // each such position takes many digits.
        let values: Vec<LockValue> = (0..200).map(|_| LockValue::random()).collect();
        for i in (0..32).filter(|i| ![12, 16].contains(i)) {
            let digits: std::collections::HashSet<u8> =
                values.iter().map(|v| v.as_str().as_bytes()[i]).collect();
            assert!(digits.len() > 8, "position {i}: {digits:?}");
        }
        assert!(!format!("{a:?}").contains(a.as_str()));
    }
}
