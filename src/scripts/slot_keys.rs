//! The keys of one slot, as every slot script takes them (`crate::keys` names them).

use std::sync::Arc;

/// The keys of one slot on every master.
#[derive(Debug, Clone)]
pub(crate) struct SlotKeys {
    /// The running claim: a lock key holding the claim's value.
    pub(crate) running: Arc<str>,
    /// The record (a hash), kept for the retention.
    pub(crate) record: Arc<str>,
    /// The fence counter of the resource `job`, on a fenced manager: slot runs and plain
    /// fenced locks on `job` draw tokens from one sequence, so a fenced store of the job
    /// orders them all, across slots.
    pub(crate) fence: Option<Arc<str>>,
    /// The epoch marker, under restart protection.
    pub(crate) epoch: Option<Arc<str>>,
}
