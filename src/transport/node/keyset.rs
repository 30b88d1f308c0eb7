//! Operations on a **set** of lock keys at once (for lock sets and elections), each one script
//! run atomically on the master, and an election's reads.
//!
//! Every request names the set's first (smallest) lock key first, so that all requests about
//! one set travel on one connection, in order: a release or a cleanup runs on the master
//! behind the acquire it follows, exactly as for a single key.

use std::time::Duration;

use super::{RedisNode, Request};
use crate::error::NodeErrorKind;
use crate::round::master::AcquireReply;
use crate::scripts::{self, acquire_reply, SetAcquire};
use crate::transport::reply::{flag_reply, unexpected};
use crate::transport::resp::Reply;

impl RedisNode {
    /// Sets every key of the set, or none (see [`scripts::MULTI_ACQUIRE`]).
    pub(crate) async fn acquire_set(
        &self,
        request: SetAcquire<'_>,
    ) -> Result<AcquireReply, NodeErrorKind> {
        let Some(first) = request.locks.first() else {
            return Err(NodeErrorKind::Server("ERR empty key set".into()));
        };
        let call = scripts::set_acquire_call(&request);
        let (reply, retried) = self.send_call(&call, false).await?;
        let mut value = acquire_reply(reply, request.fences.is_some(), request.epoch.is_some())?;
        if request.epoch.is_some() {
            // As for one key: the master's age is the younger of its marker and its life.
            let life = self.life_age(first.as_bytes());
            value.epoch_age = crate::restart_protection::master_age(value.epoch_age, life);
        }
        if retried && !value.granted {
            // The first attempt may have set the keys before the connection broke.
            return Err(NodeErrorKind::ConnectionLost(
                "connection broke; the retry found the keys already set".into(),
            ));
        }
        Ok(value)
    }

    /// Deletes the set's `n` lock keys where they hold `value`, and the keys after them if all did
    /// (see [`scripts::MULTI_RELEASE`]), announcing the release to notified waiters when `announce`
    /// (see [`Master::release_and_announce`](crate::round::master::Master::release_and_announce)).
    /// A cleanup: it bypasses the backlog bound and is written even if its caller stops waiting.
    pub(crate) async fn release_set(
        &self,
        keys: &[&str],
        n: usize,
        value: &str,
        announce: bool,
    ) -> Result<bool, NodeErrorKind> {
        let call = scripts::set_release_call(keys, n, value, announce);
        let (reply, retried) = self.send_call(&call, true).await?;
        let deleted = flag_reply(reply)?;
        if retried && !deleted {
            return Err(NodeErrorKind::ConnectionLost(
                "connection broke; the retry found nothing to delete".into(),
            ));
        }
        Ok(deleted)
    }

    /// Sets `ttl` on every key if the set's `n` lock keys all hold `value` (see
    /// [`scripts::MULTI_EXTEND`]).
    pub(crate) async fn extend_set(
        &self,
        keys: &[&str],
        n: usize,
        value: &str,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let call = scripts::set_extend_call(keys, n, value, ttl);
        let (reply, _) = self.send_call(&call, false).await?;
        flag_reply(reply)
    }

    /// Raises every fence counter in `fences` to at least `token`.
    pub(crate) async fn raise_set_fences(
        &self,
        fences: &[&str],
        token: u64,
        retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let call =
            scripts::set_raise_fences_call(fences, token, retention.max(self.fence_retention));
        let (reply, _) = self.send_call(&call, false).await?;
        flag_reply(reply)
    }

    /// An election's announcement of its leader's token (see [`scripts::ANNOUNCE`]).
    pub(crate) async fn announce(
        &self,
        lock: &str,
        announcement: &str,
        value: &str,
        token: u64,
    ) -> Result<bool, NodeErrorKind> {
        let call = scripts::announce_call(lock, announcement, value, token);
        let (reply, _) = self.send_call(&call, false).await?;
        flag_reply(reply)
    }

    /// The values of `lock` and of `announcement`, read together (`MGET`, atomic).
    pub(crate) async fn read_pair(
        &self,
        lock: &str,
        announcement: &str,
    ) -> Result<(Option<String>, Option<String>), NodeErrorKind> {
        let args: [&[u8]; 3] = [b"MGET", lock.as_bytes(), announcement.as_bytes()];
        let (reply, _) = self.request(Request::Args(&args), false).await?;
        const EXPECTED: &str = "an array of two bulk strings or nils";
        let Reply::Array(items) = &reply else {
            return Err(unexpected(EXPECTED, &reply));
        };
        let text = |item: &Reply| match item {
            Reply::Nil => Ok(None),
            Reply::Bulk(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
            _ => Err(unexpected(EXPECTED, &reply)),
        };
        match items.as_slice() {
            [lock, announced] => Ok((text(lock)?, text(announced)?)),
            _ => Err(unexpected(EXPECTED, &reply)),
        }
    }
}
