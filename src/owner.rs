//! [`Owner`]: the identity under which a reentrant lock may be acquired again.

use std::fmt;

use crate::value::LockValue;

/// The identity of a reentrant lock's owner (see
/// [`Redlock::reentrant`](crate::Redlock::reentrant)).
///
/// Async tasks move between threads, so ownership cannot be the thread: it is this explicit
/// identity, a v4 UUID (122 random bits from the OS CSPRNG), which the owner passes to every nested
/// acquisition (clone it freely). Two owners are never equal unless one is a clone of the
/// other. Its `Debug` form hides the identity, which acts as a credential.
#[derive(Clone, PartialEq, Eq)]
pub struct Owner(LockValue);

impl Owner {
    /// A new, unique owner.
    pub fn new() -> Self {
        Self(LockValue::random())
    }

    pub(crate) fn value(&self) -> &LockValue {
        &self.0
    }
}

impl Default for Owner {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Owner(***)")
    }
}
