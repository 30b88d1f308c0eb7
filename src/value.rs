//! Lock values: the random token that proves which owner set a key.

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
