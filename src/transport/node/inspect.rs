//! A read-only look at one lock key on one master, for operators (see
//! [`Redlock::inspect_lock`](crate::Redlock::inspect_lock)).

use std::time::{Duration, Instant};

use super::{RedisNode, Request};
use crate::error::NodeErrorKind;
use crate::transport::reply::unexpected;
use crate::transport::resp::Reply;

/// What one master answered about a lock key.
pub(crate) struct Raw {
    /// Round-trip time of one `PING`.
    pub(crate) rtt: Duration,
    /// `PTTL` of the key: -2 absent, -1 no expiry.
    pub(crate) pttl: i64,
    /// The key's value, if a string.
    pub(crate) value: Option<String>,
    /// The epoch marker's value.
    pub(crate) epoch: Option<String>,
    /// The master's clock, in microseconds.
    pub(crate) now_us: u64,
}

impl RedisNode {
    /// `PING`, then `PTTL key`, `GET key`, `GET epoch_key` and `TIME`, pipelined.
    pub(crate) async fn inspect(&self, key: &str, epoch_key: &str) -> Result<Raw, NodeErrorKind> {
        let started = Instant::now();
        let ping: [&[u8]; 1] = [b"PING"];
        self.request(Request::Args(&ping), false).await?;
        let rtt = started.elapsed();
        let pttl: [&[u8]; 2] = [b"PTTL", key.as_bytes()];
        let get: [&[u8]; 2] = [b"GET", key.as_bytes()];
        let epoch: [&[u8]; 2] = [b"GET", epoch_key.as_bytes()];
        let time: [&[u8]; 1] = [b"TIME"];
        let (pttl, value, epoch, time) = tokio::try_join!(
            self.request(Request::Args(&pttl), false),
            self.request(Request::Args(&get), false),
            self.request(Request::Args(&epoch), false),
            self.request(Request::Args(&time), false),
        )?;
        let pttl = match pttl.0 {
            Reply::Int(pttl) => pttl,
            other => return Err(unexpected("an integer (PTTL)", &other)),
        };
        Ok(Raw {
            rtt,
            pttl,
            value: text(value.0, "the lock value")?,
            epoch: text(epoch.0, "the epoch marker")?,
            now_us: micros(&time.0)?,
        })
    }
}

/// A string or nil; a key of another type reads as an error, which the caller reports.
fn text(reply: Reply, what: &str) -> Result<Option<String>, NodeErrorKind> {
    match reply {
        Reply::Nil => Ok(None),
        Reply::Bulk(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        other => Err(unexpected(&format!("a string or nil ({what})"), &other)),
    }
}

/// `TIME`'s `[seconds, microseconds]`, in microseconds.
fn micros(reply: &Reply) -> Result<u64, NodeErrorKind> {
    let number = |item: &Reply| match item {
        Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    match reply {
        Reply::Array(items) if items.len() == 2 => match (number(&items[0]), number(&items[1])) {
            (Some(secs), Some(us)) => Ok(secs.saturating_mul(1_000_000).saturating_add(us)),
            _ => Err(unexpected("two numbers (TIME)", reply)),
        },
        other => Err(unexpected("two numbers (TIME)", other)),
    }
}
