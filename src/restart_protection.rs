//! Restart protection's view of one master process: which life of the master a connection
//! talks to, and how long ago that life began.
//!
//! # Why the epoch marker alone is not enough
//!
//! The acquire script's epoch marker sees a master that came back **empty**. A master that
//! crashes and reloads **older** data (an RDB snapshot, Redis's default persistence; an AOF
//! whose unsynced tail was lost; a restored backup) keeps an old marker while it has forgotten
//! the locks granted since. Every start of `redis-server` gets a new `run_id` and its uptime
//! starts again, whatever it reloaded, so each connection reads both when it opens (a restart
//! always breaks every connection: no round trip per lock) and the master's votes count only
//! once the quarantine has passed **since the restart**.
//!
//! Only the very life that [`Redlock::provision`](crate::Redlock::provision) vouched for counts
//! at once (its `run_id` is recorded on the master; a snapshot reloaded by a later life carries
//! the old `run_id`, which no longer matches). Durable persistence (`appendonly yes` and
//! `appendfsync always`) is no exception by default: such a master cannot lose an acknowledged
//! write in a crash, but one restored from a backup comes back with an older AOF, an old epoch
//! marker and no trace of the locks it granted since, and nothing on the master tells that
//! restore from a plain restart. Only the opt-in
//! [`trust_durable_restarts`](crate::RedlockBuilder::trust_durable_restarts) lets such a master
//! count at once (where `CONFIG` is unavailable, as on managed services, it is not trusted), at
//! the price its docs spell out.
//!
//! What it cannot see: a master whose data is replaced **while it runs** (a full
//! resynchronisation as a replica of a copy, then `REPLICAOF NO ONE`; `DEBUG RELOAD` of an older
//! file) keeps its process, its `run_id`, the provisioning record naming it and the copy's old
//! epoch marker, and counts at once although it forgot every lock granted since the copy.
//! Restore a master by restarting it on the restored files (then it is quarantined), never in
//! place; and never make a lock master a replica.
//!
//! Uptime is what the master reports: the difference of two whole-second wall-clock readings,
//! so up to a second more than the truth. The restart is taken to be as late as that allows,
//! which only lengthens the quarantine. A master whose `INFO`
//! cannot be read is treated as restarted when the connection opened.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::NodeErrorKind;
use crate::scripts::{LuaScript, MASTER_LIFE};
use crate::transport::pipeline::Pipeline;
use crate::transport::reply::{shown, unexpected};
use crate::transport::resp::{Command, Reply};

/// A master's age for restart protection: the younger of its epoch marker's age (`marker`,
/// data lost) and its current life's (`life`, restarted whatever it reloaded); whichever is
/// known when only one is.
pub(crate) fn master_age(marker: Option<Duration>, life: Option<Duration>) -> Option<Duration> {
    match (marker, life) {
        (Some(marker), Some(life)) => Some(marker.min(life)),
        (marker, life) => marker.or(life),
    }
}

/// What a connection reads about its master when it opens, under restart protection: the
/// provisioning record's key, the master's name for traces, and whether a durable restart is
/// trusted.
#[derive(Clone)]
pub(crate) struct LifeCheck {
    pub(crate) record_key: Arc<str>,
    pub(crate) node: Arc<str>,
    /// Whether a restart with durable persistence counts at once (an opt-in).
    pub(crate) trust_durable: bool,
}

/// One life of a master (one `redis-server` process), as a connection saw it when it opened.
#[derive(Debug, Clone)]
pub(crate) struct MasterLife {
    /// The process's `run_id` (`None` if it could not be read).
    pub(crate) run_id: Option<String>,
    /// The master's uptime when the connection opened (zero if it could not be read).
    uptime: Duration,
    /// When the connection read it.
    read_at: Instant,
    /// Whether this life counts at once: provisioned in this life, or (opted in) durable.
    trusted: bool,
}

impl MasterLife {
    /// How long ago this life began, or `None` if its votes count whatever its age (see the
    /// module docs).
    pub(crate) fn age(&self) -> Option<Duration> {
        (!self.trusted).then(|| self.uptime())
    }

    /// The same life, now vouched for by provisioning.
    pub(crate) fn vouched(&self) -> Self {
        Self {
            trusted: true,
            ..self.clone()
        }
    }

    /// The master's uptime now, as seen from this connection.
    pub(crate) fn uptime(&self) -> Duration {
        self.uptime.saturating_add(self.read_at.elapsed())
    }

    /// Reads the life of the master behind `conn` (set-up of a connection under restart
    /// protection), as `check` says: its provisioning record, and whether durability counts.
    ///
    /// # Errors
    ///
    /// Only when the connection breaks; a master that does not answer as expected is treated
    /// as just restarted (and the reason traced), never as trusted.
    pub(crate) async fn read(
        conn: &Pipeline,
        check: &LifeCheck,
    ) -> Result<Arc<Self>, NodeErrorKind> {
        let node = &check.node;
        let life = match script(conn, &MASTER_LIFE, &[check.record_key.as_bytes()]).await? {
            Reply::Array(items) => match items.as_slice() {
                [run_id, Reply::Int(uptime), Reply::Int(vouched)] => Some((
                    text(run_id),
                    least_uptime(u64::try_from(*uptime).unwrap_or(0)),
                    *vouched == 1,
                )),
                _ => None,
            },
            other => {
                tracing::warn!(%node, reply = %shown(&other), "cannot read the master's run_id and uptime; treating it as just restarted");
                None
            }
        };
        let read_at = Instant::now();
        let Some((run_id, uptime, vouched)) = life else {
            return Ok(Arc::new(Self {
                run_id: None,
                uptime: Duration::ZERO,
                read_at,
                trusted: false,
            }));
        };
        // Asked only when it can matter: one round trip less per connection otherwise.
        let trusted_durable = check.trust_durable && durable(conn).await?;
        tracing::debug!(%node, ?run_id, ?uptime, vouched, trusted_durable, "master life");
        Ok(Arc::new(Self {
            run_id,
            uptime,
            read_at,
            trusted: vouched || trusted_durable,
        }))
    }
}

/// The least time a master reporting `uptime_in_seconds: seconds` can have been up: Redis
/// subtracts two whole-second wall-clock readings (its start and now), which can exceed the
/// true uptime by up to one second.
fn least_uptime(seconds: u64) -> Duration {
    Duration::from_secs(seconds.saturating_sub(1))
}

/// Whether the master cannot lose an acknowledged write: `appendonly yes` and
/// `appendfsync always`. `false` when `CONFIG` is refused or renamed away.
async fn durable(conn: &Pipeline) -> Result<bool, NodeErrorKind> {
    // One round trip: Redis 7 answers several parameters at once, as name/value pairs.
    let get: [&[u8]; 4] = [b"CONFIG", b"GET", b"appendonly", b"appendfsync"];
    Ok(durable_config(&conn.query(Command(&[&get])).await?))
}

/// Whether a `CONFIG GET appendonly appendfsync` reply says `yes` and `always`; `false` for an
/// error reply or anything else.
fn durable_config(reply: &Reply) -> bool {
    let Reply::Array(items) = reply else {
        return false;
    };
    let pairs: Vec<(Option<String>, Option<String>)> = items
        .chunks(2)
        .map(|pair| (pair.first().and_then(text), pair.get(1).and_then(text)))
        .collect();
    let value = |name: &str| {
        pairs
            .iter()
            .find(|(n, _)| n.as_deref() == Some(name))
            .and_then(|(_, v)| v.clone())
    };
    value("appendonly").as_deref() == Some("yes")
        && value("appendfsync").as_deref() == Some("always")
}

/// A bulk or status reply as text.
fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(bytes) => String::from_utf8(bytes.clone()).ok(),
        Reply::Status(text) => Some(text.clone()),
        _ => None,
    }
}

/// Runs `script` (loaded at set-up) with `keys` and no arguments.
async fn script(
    conn: &Pipeline,
    script: &LuaScript,
    keys: &[&[u8]],
) -> Result<Reply, NodeErrorKind> {
    let count = keys.len().to_string();
    let head: [&[u8]; 3] = [b"EVALSHA", script.sha().as_bytes(), count.as_bytes()];
    conn.query(Command(&[&head, keys])).await
}

/// Reads the `{run_id, uptime_s}` reply of the provisioning script.
pub(crate) fn provision_reply(reply: Reply) -> Result<(String, Duration), NodeErrorKind> {
    const EXPECTED: &str = "an array {run_id, uptime_s}";
    if let Reply::Error(error) = &reply {
        return Err(NodeErrorKind::Server(error.clone()));
    }
    match &reply {
        Reply::Array(items) => match items.as_slice() {
            [run_id, Reply::Int(uptime)] => match (text(run_id), u64::try_from(*uptime)) {
                (Some(run_id), Ok(uptime)) => Ok((run_id, Duration::from_secs(uptime))),
                _ => Err(unexpected(EXPECTED, &reply)),
            },
            _ => Err(unexpected(EXPECTED, &reply)),
        },
        _ => Err(unexpected(EXPECTED, &reply)),
    }
}

/// Reads `uptime_in_seconds` from an `INFO server` reply.
pub(crate) fn uptime_of_info(reply: &Reply) -> Result<Duration, NodeErrorKind> {
    let seconds = text(reply).and_then(|info| {
        info.lines()
            .find_map(|line| line.strip_prefix("uptime_in_seconds:"))
            .and_then(|value| value.trim().parse::<u64>().ok())
    });
    seconds
        .map(Duration::from_secs)
        .ok_or_else(|| unexpected("INFO server text with uptime_in_seconds", reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provision_reply_is_read_strictly() {
        let ok = Reply::Array(vec![Reply::Bulk(b"abc".to_vec()), Reply::Int(7)]);
        assert_eq!(
            provision_reply(ok).expect("valid"),
            ("abc".to_string(), Duration::from_secs(7))
        );
        for bad in [
            Reply::Nil,
            Reply::Int(1),
            Reply::Array(vec![Reply::Bulk(b"abc".to_vec()), Reply::Int(-1)]),
            Reply::Array(vec![Reply::Int(1), Reply::Int(1)]),
            Reply::Error("ERR nope".into()),
        ] {
            assert!(provision_reply(bad).is_err());
        }
    }

    #[test]
    fn only_appendonly_with_fsync_always_is_durable() {
        let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        let config = |only: &str, fsync: &str| {
            Reply::Array(vec![
                bulk("appendonly"),
                bulk(only),
                bulk("appendfsync"),
                bulk(fsync),
            ])
        };
        assert!(durable_config(&config("yes", "always")));
        assert!(!durable_config(&config("yes", "everysec")));
        assert!(!durable_config(&config("no", "always")));
        assert!(!durable_config(&Reply::Error(
            "ERR unknown command 'CONFIG'".into()
        )));
        assert!(!durable_config(&Reply::Array(vec![
            bulk("appendonly"),
            bulk("yes")
        ])));
    }

    #[test]
    fn trusted_lives_have_no_age_and_others_age() {
        let life = |trusted| MasterLife {
            run_id: Some("r".into()),
            uptime: Duration::from_secs(5),
            read_at: Instant::now(),
            trusted,
        };
        assert_eq!(life(true).age(), None);
        assert!(life(false).age().expect("an age") >= Duration::from_secs(5));
    }
}
