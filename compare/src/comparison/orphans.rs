//! Orphans: what an acquisition that was cancelled, and a holder that crashed, leave on the
//! servers, read on the servers themselves (not through any lock client): the etcd keys under
//! the resource's prefix, the ZooKeeper znodes in its directory, the PostgreSQL sessions that
//! hold or wait for its advisory lock, its lease row while unexpired.
//!
//! The scene, on a resource of its own while the workers contend on theirs: a holder takes
//! the lock; a waiter queues behind it (its entry is seen on the servers) and its acquisition
//! is dropped, its client living on; the waiter's entry must then be gone within the bound.
//! Then the holder crashes: its links are closed and nothing of it gets through again (as when
//! its process dies), without a release; its entry must be gone, or unexpired no longer,
//! within the bound: the TTL, lease or session timeout, plus [`GRACE`] for the server's expiry
//! sweep and the read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_testkit::Mode;
use serde_json::json;

use super::servers::Servers;
use super::subjects::SubjectKind;
use super::testbed::Testbed;
use super::workload::{Made, Recorder};
use crate::server::conninfo;
use crate::{EtcdOptions, ZkOptions};

/// The resource of the scene.
const RESOURCE: &str = "orphans";
/// Beyond the TTL: etcd sweeps expired leases every 500 ms, ZooKeeper expires sessions by
/// the tick (200 ms here); both then commit the deletion; two shared cores.
const GRACE: Duration = Duration::from_millis(1500);
/// How long the waiter may take to queue.
const QUEUE_WAIT: Duration = Duration::from_secs(10);
/// How long a lease-row waiter polls before it is cancelled (it leaves nothing to see).
const POLL_WAIT: Duration = Duration::from_millis(500);
/// How often the servers are read.
const READ_EVERY: Duration = Duration::from_millis(50);

/// What the scene made (the fault and its proof: the waiter queued, the holder crashed) and
/// what it found (every orphan gone within its bound, or which was not).
pub(super) struct Scene {
    /// The fault and its reading.
    pub(super) made: Made,
    /// The orphans' lifetimes, or the one that outlived its bound.
    pub(super) check: Result<String, String>,
}

/// Reads a resource's entries on the servers.
enum Reader {
    Etcd(Box<etcd_client::Client>, String),
    Zookeeper(zookeeper_client::Client, String),
    Advisory(tokio_postgres::Client, i64),
    LeaseRow(tokio_postgres::Client, String),
}

impl Reader {
    async fn connect(servers: &Servers, kind: SubjectKind, resource: &str) -> Result<Self, String> {
        Ok(match servers {
            Servers::Etcd(cluster) => {
                let client = etcd_client::Client::connect(cluster.endpoints(), None)
                    .await
                    .map_err(|e| format!("etcd: {e}"))?;
                let prefix = EtcdOptions::new(Duration::from_secs(2)).prefix_of(resource);
                Self::Etcd(Box::new(client), prefix)
            }
            Servers::Zookeeper(ensemble) => {
                let client = zookeeper_client::Client::connect(&ensemble.connect_string())
                    .await
                    .map_err(|e| format!("zookeeper: {e}"))?;
                let dir = ZkOptions::new(Duration::from_secs(2)).dir_of(resource);
                Self::Zookeeper(client, dir)
            }
            Servers::Postgres(server) => {
                let client = crate::postgres::connect(&conninfo(server.port()), "reader")
                    .await
                    .map_err(|e| e.to_string())?;
                if kind == SubjectKind::PgAdvisory {
                    Self::Advisory(client, crate::postgres::advisory_key(resource))
                } else {
                    Self::LeaseRow(client, resource.to_owned())
                }
            }
            Servers::Redis(_) => return Err("quorumlock's keys are jepsen-lite's to read".into()),
        })
    }

    /// How many entries the resource has on the servers now.
    async fn entries(&self) -> Result<usize, String> {
        let n = match self {
            Self::Etcd(client, prefix) => {
                let options = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only();
                let reply = client
                    .kv_client()
                    .get(prefix.as_str(), Some(options))
                    .await
                    .map_err(|e| e.to_string())?;
                i64::max(reply.count(), 0) as usize
            }
            Self::Zookeeper(client, dir) => match client.list_children(dir).await {
                Ok(children) => children.len(),
                Err(zookeeper_client::Error::NoNode) => 0,
                Err(e) => return Err(e.to_string()),
            },
            // A bigint advisory key is stored as (classid, objid) = (high, low) 32 bits.
            Self::Advisory(client, key) => {
                let row = client
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                         AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2",
                        &[&((key >> 32) & 0xffff_ffff), &(key & 0xffff_ffff)],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                usize::try_from(row.get::<_, i64>(0)).unwrap_or(0)
            }
            Self::LeaseRow(client, resource) => {
                let row = client
                    .query_one(
                        "SELECT count(*) FROM quorumlock_leases \
                         WHERE name = $1 AND lock_until > now()",
                        &[resource],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                usize::try_from(row.get::<_, i64>(0)).unwrap_or(0)
            }
        };
        Ok(n)
    }

    /// The entries themselves where they have names (etcd keys, ZooKeeper znodes).
    async fn names(&self) -> Result<Vec<String>, String> {
        Ok(match self {
            Self::Etcd(client, prefix) => {
                let options = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only();
                let reply = client
                    .kv_client()
                    .get(prefix.as_str(), Some(options))
                    .await
                    .map_err(|e| e.to_string())?;
                reply
                    .kvs()
                    .iter()
                    .map(|kv| {
                        format!(
                            "{} (lease {:x}, revision {})",
                            String::from_utf8_lossy(kv.key()),
                            kv.lease(),
                            kv.create_revision()
                        )
                    })
                    .collect()
            }
            Self::Zookeeper(client, dir) => match client.list_children(dir).await {
                Ok(children) => children,
                Err(zookeeper_client::Error::NoNode) => Vec::new(),
                Err(e) => return Err(e.to_string()),
            },
            Self::Advisory(..) | Self::LeaseRow(..) => {
                vec![format!("{} holding or waiting", self.entries().await?)]
            }
        })
    }

    /// Reads until `done` says yes or `within` passes; when it said yes, and the last count.
    async fn until(
        &self,
        within: Duration,
        done: impl Fn(usize) -> bool,
    ) -> Result<(Option<Duration>, usize), String> {
        let start = Instant::now();
        loop {
            let n = self.entries().await?;
            if done(n) {
                return Ok((Some(start.elapsed()), n));
            }
            if start.elapsed() >= within {
                return Ok((None, n));
            }
            tokio::time::sleep(READ_EVERY).await;
        }
    }
}

/// Plays the scene on `testbed` (proxy rows `holder_row` and `holder_row + 1` are the
/// holder's and the waiter's); `ttl` is the subject's TTL, lease or session timeout.
pub(super) async fn scene(
    testbed: &Testbed,
    holder_row: usize,
    recorder: &Recorder,
    ttl: Duration,
) -> Scene {
    let fault = "cancel a queued acquisition, then crash the holder".to_owned();
    match play(testbed, holder_row, recorder, ttl).await {
        Ok(scene) => scene,
        Err(e) => Scene {
            made: (fault, Err(e.clone())),
            check: Err(e),
        },
    }
}

async fn play(
    testbed: &Testbed,
    holder_row: usize,
    recorder: &Recorder,
    ttl: Duration,
) -> Result<Scene, String> {
    let fault = "cancel a queued acquisition, then crash the holder".to_owned();
    let bound = ttl + GRACE;
    let reader = Reader::connect(&testbed.servers, testbed.kind, RESOURCE).await?;
    let holder = testbed
        .client(holder_row)
        .await
        .map_err(|e| format!("holder: {e}"))?;
    let waiter = testbed
        .client(holder_row + 1)
        .await
        .map_err(|e| format!("waiter: {e}"))?;
    let held = holder
        .acquire(RESOURCE, Instant::now() + QUEUE_WAIT)
        .await
        .map_err(|e| format!("holder: {e}"))?;
    let alone = reader.entries().await?;

    // The waiter queues; its acquisition is dropped; its client lives on.
    let queued_waiter = Arc::clone(&waiter);
    let wait = tokio::spawn(async move {
        queued_waiter
            .acquire(RESOURCE, Instant::now() + Duration::from_secs(60))
            .await
            .map(drop)
    });
    let queued = if testbed.kind == SubjectKind::PgLease {
        tokio::time::sleep(POLL_WAIT).await;
        (!wait.is_finished()).then(|| format!("the waiter polled for {POLL_WAIT:?} (no queue)"))
    } else {
        let (seen, n) = reader.until(QUEUE_WAIT, |n| n > alone).await?;
        seen.map(|after| {
            format!(
                "the waiter's entry seen on the servers after {} ms ({n} entries)",
                after.as_millis()
            )
        })
    };
    wait.abort();
    let _ = wait.await;
    recorder.nemesis("cancel", json!({"resource": RESOURCE}));
    let (cancel_gone, left) = reader.until(bound, |n| n <= alone).await?;

    // The holder crashes.
    let before = testbed.links.row_affected(holder_row);
    testbed.links.set_row(holder_row, Mode::Close);
    drop(held);
    drop(holder);
    recorder.nemesis("crash-client", json!({"resource": RESOURCE}));
    let (crash_gone, remaining) = reader.until(bound, |n| n == 0).await?;
    let closed = testbed.links.row_affected(holder_row) - before;
    testbed.links.set_row(holder_row, Mode::Pass);
    drop(waiter);
    recorder.nemesis("heal", json!({}));

    let proof = match queued {
        Some(queued) => Ok(format!(
            "{queued}; then the holder's links closed ({closed} connections or bytes cut) \
             without a release"
        )),
        None => Err("the waiter never queued on the servers".to_owned()),
    };
    let check = match (cancel_gone, crash_gone) {
        (Some(c), Some(h)) => Ok(format!(
            "the cancelled waiter's entry gone {} ms after the cancel, the crashed holder's {} \
             ms after the crash (bound {} ms)",
            c.as_millis(),
            h.as_millis(),
            bound.as_millis()
        )),
        (None, _) => Err(format!(
            "the cancelled waiter's entry still there {} ms after the cancel ({left} entries, \
             {alone} before it queued)",
            bound.as_millis()
        )),
        (_, None) => Err(format!(
            "the crashed holder's entry still there {} ms after the crash ({remaining} \
             entries)",
            bound.as_millis()
        )),
    };
    Ok(Scene {
        made: (fault, proof),
        check,
    })
}

/// What the servers hold for `resource` now, read on them directly: for a cell whose lock
/// was not granted again after the heal.
pub(super) async fn describe(testbed: &Testbed, resource: &str) -> String {
    let read = async {
        let reader = Reader::connect(&testbed.servers, testbed.kind, resource).await?;
        reader.names().await
    };
    match read.await {
        Ok(names) => format!("on the servers at the end, {resource:?} has: {names:?}"),
        Err(e) => format!("could not read {resource:?} on the servers at the end: {e}"),
    }
}
