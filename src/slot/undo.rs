//! [`UndoClaim`]: the undo of a claim that won its round but is not in its caller's hands yet,
//! run if the call that won it is dropped before handing it over.
//!
//! Between the round's decision and the [`SlotRun`](super::SlotRun) its caller receives, a
//! claim call may still await (the write-back of a fencing token, the other slots of a batch).
//! A future dropped there must not leave the claim in place: nobody would run the slot, and
//! once the claim expired it would read as abandoned, which under the default at-most-once
//! policy means never run. The undo restores the slot as it was before the claim, so that it
//! can be claimed again.

use std::sync::Arc;

use super::round::{self, Won};
use crate::keys::SlotKeys;
use crate::round::Nodes;
use crate::transport::node::RedisNode;
use crate::value::LockValue;

/// Undoes a won claim in the background when dropped while armed.
pub(crate) struct UndoClaim {
    nodes: Nodes<RedisNode>,
    keys: SlotKeys,
    /// The key that picks the connection of the undo: the one the claim travelled on (the
    /// first slot's running key for a batch), so that the undo runs behind a claim that
    /// reaches a slow master late.
    route: Arc<str>,
    value: LockValue,
    may_hold: Arc<[bool]>,
    armed: bool,
}

impl UndoClaim {
    /// Arms the undo of `won`, the claim of the slot of `keys` sent on `route`'s connection.
    pub(crate) fn new(
        nodes: &Nodes<RedisNode>,
        keys: &SlotKeys,
        route: &Arc<str>,
        won: &Won,
    ) -> Self {
        Self {
            nodes: Arc::clone(nodes),
            keys: keys.clone(),
            route: Arc::clone(route),
            value: won.ownership.value.clone(),
            may_hold: Arc::clone(&won.holders.may_hold),
            armed: true,
        }
    }

    /// The claim was handed over: its new owner undoes or releases it.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for UndoClaim {
    fn drop(&mut self) {
        if self.armed {
            round::undo_claim_in_background(
                &self.nodes,
                &self.route,
                &self.keys,
                &self.value,
                &self.may_hold,
            );
        }
    }
}
