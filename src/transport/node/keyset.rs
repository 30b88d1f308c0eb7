//! Operations on a **set** of lock keys at once (for `lock_all` and elections), each one script
//! run atomically on the master, and an election's reads.
//!
//! Every request names the set's first (smallest) lock key first, so that all requests about
//! one set travel on one connection, in order: a release or a cleanup runs on the master
//! behind the acquire it follows, exactly as for a single key.

use std::time::Duration;

use super::{millis, RedisNode, Request};
use crate::error::NodeErrorKind;
use crate::round::master::AcquireReply;
use crate::scripts;
use crate::scripts::acquire_reply;
use crate::transport::reply::{flag_reply, unexpected};
use crate::transport::resp::{Decimal, Reply};

/// An all-or-nothing acquisition of a set of keys on one master.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetAcquire<'a> {
    /// The lock keys, sorted and without duplicates.
    pub(crate) locks: &'a [&'a str],
    /// Their fence counters (same order), when a fencing token is wanted.
    pub(crate) fences: Option<&'a [&'a str]>,
    /// The epoch marker, when restart protection is on.
    pub(crate) epoch: Option<&'a str>,
    /// The value every key gets.
    pub(crate) value: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence_retention: Duration,
    pub(crate) fence_proposal: u64,
    pub(crate) fence_cap: Duration,
}

impl RedisNode {
    /// Sets every key of the set, or none (see [`scripts::MULTI_ACQUIRE`]).
    pub(crate) async fn acquire_set(
        &self,
        request: SetAcquire<'_>,
    ) -> Result<AcquireReply, NodeErrorKind> {
        let Some(first) = request.locks.first() else {
            return Err(NodeErrorKind::Server("ERR empty key set".into()));
        };
        let n = Decimal::new(request.locks.len() as u64);
        let ttl = Decimal::new(millis(request.ttl));
        let retention = Decimal::new(millis(request.fence_retention.max(request.ttl)));
        let proposal = Decimal::new(request.fence_proposal);
        let cap = Decimal::new(u64::try_from(request.fence_cap.as_micros()).unwrap_or(u64::MAX));
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        let mut keys: Vec<&[u8]> = request.locks.iter().map(|k| k.as_bytes()).collect();
        keys.extend(
            request
                .fences
                .unwrap_or_default()
                .iter()
                .map(|k| k.as_bytes()),
        );
        keys.extend(request.epoch.map(str::as_bytes));
        let args: [&[u8]; 8] = [
            request.value.as_bytes(),
            ttl.as_bytes(),
            n.as_bytes(),
            flag(request.fences.is_some()),
            flag(request.epoch.is_some()),
            retention.as_bytes(),
            proposal.as_bytes(),
            cap.as_bytes(),
        ];
        let script = Request::Script {
            script: &scripts::MULTI_ACQUIRE,
            keys: &keys,
            args: &args,
        };
        let (reply, retried) = self.request(script, false).await?;
        let mut value = acquire_reply(reply, request.fences.is_some(), request.epoch.is_some())?;
        if request.epoch.is_some() {
            // As for one key: the master's age is the younger of its marker and its life.
            let life = self.connection_for(first.as_bytes()).life();
            let since_restart = life.map_or(Some(Duration::ZERO), |life| life.age());
            value.epoch_age = match (value.epoch_age, since_restart) {
                (Some(marker), Some(restart)) => Some(marker.min(restart)),
                (marker, restart) => marker.or(restart),
            };
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
        let n = Decimal::new(n as u64);
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let announce: &[u8] = if announce { b"1" } else { b"0" };
        let args: [&[u8]; 3] = [value.as_bytes(), n.as_bytes(), announce];
        let script = Request::Script {
            script: &scripts::MULTI_RELEASE,
            keys: &keys,
            args: &args,
        };
        let (reply, retried) = self.request(script, true).await?;
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
        let n = Decimal::new(n as u64);
        let ttl = Decimal::new(millis(ttl));
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let args: [&[u8]; 3] = [value.as_bytes(), n.as_bytes(), ttl.as_bytes()];
        let script = Request::Script {
            script: &scripts::MULTI_EXTEND,
            keys: &keys,
            args: &args,
        };
        let (reply, _) = self.request(script, false).await?;
        flag_reply(reply)
    }

    /// Raises every fence counter in `fences` to at least `token`.
    pub(crate) async fn raise_set_fences(
        &self,
        fences: &[&str],
        token: u64,
        retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let token = Decimal::new(token);
        let retention = Decimal::new(millis(retention.max(self.fence_retention)));
        let keys: Vec<&[u8]> = fences.iter().map(|k| k.as_bytes()).collect();
        let args: [&[u8]; 2] = [token.as_bytes(), retention.as_bytes()];
        let script = Request::Script {
            script: &scripts::MULTI_RAISE_FENCE,
            keys: &keys,
            args: &args,
        };
        let (reply, _) = self.request(script, false).await?;
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
        let token = Decimal::new(token);
        let keys = [lock.as_bytes(), announcement.as_bytes()];
        let args: [&[u8]; 2] = [value.as_bytes(), token.as_bytes()];
        let script = Request::Script {
            script: &scripts::ANNOUNCE,
            keys: &keys,
            args: &args,
        };
        let (reply, _) = self.request(script, false).await?;
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
