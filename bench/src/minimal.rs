//! The practical floor: a minimal Redlock with nothing but the algorithm's core.
//!
//! `SET key value NX PX ttl` to every master at once (`join_all` over one multiplexed
//! connection per master), a grant on a quorum with validity left, and a Lua compare-and-delete
//! release to every master. No per-node timeout beyond the `redis` crate's default response
//! timeout, no early decision, no cleanup of late writes, no retries, no reconnection.

use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::RngExt;
use redis::aio::MultiplexedConnection;

const RELEASE: &str = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end"#;

/// One connection per master and the release script.
pub(crate) struct Minimal {
    conns: Vec<MultiplexedConnection>,
    release: redis::Script,
}

impl Minimal {
    /// Connects to every master.
    pub(crate) async fn connect(urls: &[String]) -> redis::RedisResult<Self> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            conns.push(client.get_multiplexed_async_connection().await?);
        }
        Ok(Self {
            conns,
            release: redis::Script::new(RELEASE),
        })
    }

    /// One round: the lock's random value when a quorum granted it with validity left.
    pub(crate) async fn lock(&self, key: &str, ttl: Duration) -> Result<String, String> {
        let value = format!("{:032x}", rand::rng().random::<u128>());
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let started = Instant::now();
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let value = &value;
            async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async::<Option<String>>(&mut c)
                    .await
            }
        }))
        .await;
        let granted = replies.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        let drift = ttl.mul_f64(0.01) + Duration::from_millis(2);
        let validity = ttl.saturating_sub(started.elapsed() + drift);
        if granted > self.conns.len() / 2 && !validity.is_zero() {
            return Ok(value);
        }
        self.unlock(key, &value).await;
        let errors = replies.iter().filter(|r| r.is_err()).count();
        Err(format!(
            "{granted} of {} granted, {errors} errors",
            self.conns.len()
        ))
    }

    /// Compare-and-delete on every master.
    pub(crate) async fn unlock(&self, key: &str, value: &str) {
        join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            let release = &self.release;
            async move {
                release
                    .key(key)
                    .arg(value)
                    .invoke_async::<i64>(&mut c)
                    .await
            }
        }))
        .await;
    }
}
