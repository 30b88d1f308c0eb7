//! Slot claims on one master: each request is one slot script (`crate::scripts::slot_claim`,
//! `slot_finish`, `slot_status`), written and read by that script's own file; the node only
//! carries it, on the connection of its first key, in order.

use super::RedisNode;
use crate::error::NodeErrorKind;
use crate::restart_protection::master_age;
use crate::round::master::SlotMaster;
use crate::scripts::slot_claim::{self, ClaimArgs, ClaimReply, SlotClaimItem};
use crate::scripts::slot_finish::{self, Ending, FinishArgs};
use crate::scripts::slot_keys::SlotKeys;
use crate::scripts::slot_status::SlotRecord;
use crate::scripts::slot_status::{self, Seen};
use crate::scripts::{CLAIM_SLOTS, FINISH_SLOTS, REVERT_SLOTS, SLOT_STATUS};

fn slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(Vec::as_slice).collect()
}

impl SlotMaster for RedisNode {
    async fn claim_slots(
        &self,
        items: &[SlotClaimItem<'_>],
        args: &ClaimArgs,
    ) -> Result<Vec<ClaimReply>, NodeErrorKind> {
        let Some(first) = items.first() else {
            return Ok(Vec::new());
        };
        let (keys, argv) = slot_claim::claim_call(items, args);
        let (reply, _) = self
            .run_script(&CLAIM_SLOTS, &slices(&keys), &slices(&argv), false)
            .await?;
        let mut replies =
            slot_claim::claim_replies(reply, items.len(), args.fencing, args.epoch_check)?;
        if args.epoch_check {
            // The life read is that of the connection the answer came on: the first slot's.
            let life = self.life_age(first.keys.running.as_bytes());
            for reply in &mut replies {
                reply.epoch_age = master_age(reply.epoch_age, life);
            }
        }
        Ok(replies)
    }

    async fn undo_slot_claims(
        &self,
        route: &str,
        items: &[SlotClaimItem<'_>],
    ) -> Result<(), NodeErrorKind> {
        if items.is_empty() {
            return Ok(());
        }
        let (keys, args) = slot_claim::undo_call(route, items);
        self.run_script(&REVERT_SLOTS, &slices(&keys), &slices(&args), true)
            .await
            .map(|_| ())
    }

    async fn finish_slots(
        &self,
        ending: Ending,
        runs: &[FinishArgs],
    ) -> Result<Vec<bool>, NodeErrorKind> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let (keys, args) = slot_finish::finish_call(ending, runs);
        let (reply, _) = self
            .run_script(&FINISH_SLOTS, &slices(&keys), &slices(&args), false)
            .await?;
        slot_finish::finish_replies(reply, runs.len())
    }

    async fn slot_status(&self, keys: &SlotKeys) -> Result<(Seen, SlotRecord), NodeErrorKind> {
        let (reply, _) = self
            .run_script(&SLOT_STATUS, &slot_status::status_keys(keys), &[], false)
            .await?;
        slot_status::status_reply(reply)
    }
}
