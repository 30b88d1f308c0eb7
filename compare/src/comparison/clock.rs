//! Clock bumps, where jepsen-lite's wall-clock shim reaches the servers. The shim works by
//! `LD_PRELOAD` on libc: it reaches the redis masters (their key expiry follows the wall clock)
//! and PostgreSQL (`now()`, in the postmaster and every backend it forks, which judges the
//! lease rows). It does not reach etcd (a Go binary reads the clock through the vDSO, without
//! libc) nor ZooKeeper (its sessions run on the JVM's monotonic clock), and `pg-advisory`
//! has no clock.
//!
//! The servers start under the shim at their true time. During a holder's section (see
//! `rendezvous.rs`) the chosen servers' clocks step forward by more than the TTL and stay
//! there, as a host's clock stepped by NTP would. The proof, read on the servers themselves:
//! the holder's key or lease row was there before the step and is gone (or another's) after
//! it, each stepped server's own clock (`TIME`, `clock_timestamp()`) is ahead of this host's
//! by the step, and the holder's client still took its grant to be valid.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jepsen_lite::clockshim::Clocks;
use jepsen_lite::evidence::{clock_offset_ms, offset_took_effect};
use quorumlock_testkit::MasterOptions;
use serde_json::json;
use tempfile::TempDir;

use super::rendezvous::Holding;
use super::servers::Servers;
use super::subjects::SubjectKind;
use super::workload::{Made, Recorder, RESOURCE};
use crate::server::{conninfo, PgServer};

/// The control file of the PostgreSQL server (the redis masters' are named by port).
const PG_NODE: &str = "postgres";

/// The shim, built for one cell, and the wrapper that starts redis masters under it.
#[derive(Debug)]
pub(super) struct Shim {
    clocks: Clocks,
    wrapper: PathBuf,
    // Last: the shim's files go after the servers that map them.
    _dir: TempDir,
}

impl Shim {
    /// Builds the shim into a directory of its own, readable by the `postgres` user that
    /// PostgreSQL runs as when this process is root.
    ///
    /// # Errors
    ///
    /// Why it could not be built (no C compiler).
    pub(super) fn install() -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-clock-")
            .tempdir()
            .map_err(|e| format!("a directory for the clock shim: {e}"))?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("opening the shim's directory to the servers: {e}"))?;
        let (clocks, wrapper) =
            Clocks::install(dir.path()).map_err(|e| format!("building the clock shim: {e}"))?;
        Ok(Self {
            clocks,
            wrapper,
            _dir: dir,
        })
    }

    /// Starts the servers of `kind` under the shim. Blocking.
    ///
    /// # Errors
    ///
    /// Why they did not start, or that the shim does not reach them.
    pub(super) fn start_servers(&self, kind: SubjectKind) -> Result<Servers, String> {
        match kind {
            SubjectKind::RedisSingle | SubjectKind::Redlock3 | SubjectKind::Redlock5 => {
                // These masters only: the environment would name it to every master started
                // meanwhile, and lose what the user exported.
                let opts = MasterOptions::new().binary(&self.wrapper);
                let cluster = super::testbed::redis_with(kind.servers(), opts)?;
                Ok(Servers::Redis(cluster))
            }
            SubjectKind::PgLease | SubjectKind::PgAdvisory => {
                let env: Vec<(OsString, OsString)> = self
                    .clocks
                    .preload(PG_NODE)
                    .map_err(|e| format!("the shim's control file: {e}"))?
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into_os_string()))
                    .collect();
                let server =
                    PgServer::start_with_env(&env).map_err(|e| format!("{}: {e}", kind.label()))?;
                Ok(Servers::Postgres(server))
            }
            SubjectKind::Etcd | SubjectKind::Zookeeper => {
                Err(format!("the clock shim does not reach {}", kind.label()))
            }
        }
    }

    fn step(&self, servers: &Servers, i: usize, offset_ms: i64) -> std::io::Result<()> {
        match servers {
            Servers::Postgres(_) => self.clocks.set_node(PG_NODE, offset_ms, 0),
            _ => self.clocks.set(servers.ports()[i], offset_ms, 0),
        }
    }
}

/// What a server says of the lock and of its clock at one moment.
#[derive(Debug)]
struct Look {
    /// The holder's mark on the server: the key's value, the lease row's token and whether
    /// the database takes it to be live; `None` when there is nothing.
    lock: Option<String>,
    /// What the server holds, as read (a lease row the database takes to be expired too).
    seen: Option<String>,
    /// Its clock ahead of this host's, in ms.
    offset_ms: i64,
}

/// Steps the clocks of `count` servers that carry `holder`'s mark (the first ones) forward by
/// `step` while it holds; the reading proves it on the servers. With `bare`, the proof also
/// shows that the holder stood on a bare majority: its mark on exactly a majority of the
/// servers before the step.
pub(super) async fn bump(
    shim: &Shim,
    servers: &Servers,
    count: usize,
    bare: bool,
    holder: &Holding,
    recorder: &Recorder,
    step: Duration,
) -> Made {
    let step_ms = i64::try_from(step.as_millis()).unwrap_or(i64::MAX);
    let fault = |targets: &[usize]| {
        let names: Vec<String> = targets.iter().map(|&i| servers.name(i)).collect();
        format!(
            "step the clock of {} {step_ms} ms forward while {} holds",
            if names.is_empty() {
                format!("{count} of the servers holding its lock")
            } else {
                names.join(", ")
            },
            holder.lease
        )
    };
    let mut before = Vec::new();
    for i in 0..servers.len() {
        match look(servers, i).await {
            Ok(l) => before.push(l),
            Err(e) => {
                return (
                    fault(&[]),
                    Err(format!("{} before the step: {e}", servers.name(i))),
                )
            }
        }
    }
    let targets = holders_servers(&before, count);
    let fault = fault(&targets);
    if targets.len() < count {
        return (
            fault,
            Err(format!(
                "the holder's lock was on fewer than {count} servers before the step: {:?}",
                before.iter().map(|l| l.lock.as_deref()).collect::<Vec<_>>()
            )),
        );
    }
    let targets = targets.as_slice();
    for &i in targets {
        if let Err(e) = shim.step(servers, i, step_ms) {
            return (
                fault,
                Err(format!("stepping {}'s clock: {e}", servers.name(i))),
            );
        }
    }
    recorder.nemesis(
        "clock-bump",
        json!({"nodes": targets, "offset_ms": step_ms, "lease": holder.lease}),
    );
    let mut after = Vec::new();
    for i in 0..servers.len() {
        match look(servers, i).await {
            Ok(l) => after.push(l),
            Err(e) => {
                return (
                    fault,
                    Err(format!("{} after the step: {e}", servers.name(i))),
                )
            }
        }
    }
    let still_valid = holder.valid_until.is_none_or(|u| Instant::now() < u);
    recorder.nemesis("heal", json!({}));
    let names: Vec<String> = (0..servers.len()).map(|i| servers.name(i)).collect();
    let mut reading = judge(&names, targets, &before, &after, step_ms, still_valid);
    // The lease row names its holder by token: it must be this holder's.
    if let (Servers::Postgres(_), Some(token)) = (servers, holder.token) {
        let mark = format!("token {token}, live");
        if before.first().and_then(|l| l.lock.as_deref()) != Some(mark.as_str()) {
            reading =
                reading.and_then(|text| Err(format!("{text}; not the holder's row ({mark})")));
        }
    }
    if bare {
        reading = reading.and_then(|text| bare_majority(&before, targets, text));
    }
    (fault, reading)
}

/// The first `count` servers that carry the holder's mark: the mark on the most servers (a
/// holder's lock is on a majority, a waiter's leftovers on fewer).
fn holders_servers(before: &[Look], count: usize) -> Vec<usize> {
    let on = |mark: &str| {
        before
            .iter()
            .filter(|l| l.lock.as_deref() == Some(mark))
            .count()
    };
    let Some(mark) = before
        .iter()
        .filter_map(|l| l.lock.as_deref())
        .max_by_key(|mark| on(mark))
    else {
        return Vec::new();
    };
    (0..before.len())
        .filter(|&i| before[i].lock.as_deref() == Some(mark))
        .take(count)
        .collect()
}

/// Whether the first stepped server's mark was on exactly a majority of the servers.
fn bare_majority(before: &[Look], targets: &[usize], text: String) -> Result<String, String> {
    let mark = targets
        .first()
        .and_then(|&i| before.get(i))
        .and_then(|l| l.lock.as_deref());
    let on = before
        .iter()
        .filter(|l| mark.is_some() && l.lock.as_deref() == mark)
        .count();
    let majority = before.len() / 2 + 1;
    let text = format!("{text}; the holder's key was on {on} of {}", before.len());
    if on == majority {
        Ok(format!("{text}, a bare majority"))
    } else {
        Err(format!("{text}, not a bare majority of {majority}"))
    }
}

/// Whether the step took effect: every stepped server held the holder's mark before and not
/// after, and its clock is ahead by the step; no other server's clock moved by as much as
/// half of it (the cell's claim is about which servers stepped: a majority, or in
/// Kleppmann's case one master); the holder still took its grant to be valid. `names`,
/// `before` and `after` cover every server.
fn judge(
    names: &[String],
    targets: &[usize],
    before: &[Look],
    after: &[Look],
    step_ms: i64,
    still_valid: bool,
) -> Result<String, String> {
    let marks: Vec<String> = before
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}: {}", names[i], l.lock.as_deref().unwrap_or("none")))
        .collect();
    let mut text = format!("before, the lock on each server: [{}]", marks.join("; "));
    let mut ok = still_valid;
    for &i in targets {
        let Some(now) = after.get(i) else {
            return Err(format!("{text}; no reading of {} after the step", names[i]));
        };
        let was = before.get(i).and_then(|l| l.lock.as_deref());
        let gone = was.is_some() && now.lock.as_deref() != was;
        let ahead = offset_took_effect(now.offset_ms, step_ms);
        ok &= gone && ahead;
        text.push_str(&format!(
            "; after, {} holds {} ({}), its clock {} ms ahead",
            names[i],
            now.seen.as_deref().unwrap_or("none"),
            if gone {
                "the holder's is gone"
            } else {
                "the holder's is still there, or never was"
            },
            now.offset_ms
        ));
    }
    let untouched: Vec<usize> = (0..after.len()).filter(|i| !targets.contains(i)).collect();
    if !untouched.is_empty() {
        let offsets: Vec<String> = untouched
            .iter()
            .map(|&i| format!("{} {} ms", names[i], after[i].offset_ms))
            .collect();
        let moved = untouched
            .iter()
            .any(|&i| after[i].offset_ms.abs() >= step_ms.abs() / 2);
        ok &= !moved;
        text.push_str(&format!(
            "; the clocks not stepped: {}{}",
            offsets.join(", "),
            if moved { " (one moved too)" } else { "" }
        ));
    }
    text.push_str(if still_valid {
        "; the holder still held by its own clock"
    } else {
        "; the holder's validity had ended"
    });
    if ok {
        Ok(text)
    } else {
        Err(text)
    }
}

/// Reads the lock's mark and the clock on server `i`.
async fn look(servers: &Servers, i: usize) -> Result<Look, String> {
    match servers {
        Servers::Redis(cluster) => {
            let master = cluster.get(i).ok_or("no such master")?;
            let key = format!("{}{RESOURCE}", quorumlock::defaults::KEY_PREFIX);
            tokio::task::block_in_place(|| {
                let value = master
                    .command(&["GET", &key])
                    .map_err(|e| format!("GET: {e}"))?;
                let time = master
                    .command(&["TIME"])
                    .map_err(|e| format!("TIME: {e}"))?;
                let mut fields = time.lines().filter_map(|l| l.trim().parse::<u64>().ok());
                let (Some(secs), Some(micros)) = (fields.next(), fields.next()) else {
                    return Err(format!("TIME answered {time:?}"));
                };
                let lock = (value != "(nil)").then_some(value);
                Ok(Look {
                    seen: lock.clone(),
                    lock,
                    offset_ms: clock_offset_ms(secs, micros, host_us()),
                })
            })
        }
        Servers::Postgres(server) => {
            let client = crate::postgres::connect(&conninfo(server.port()), "clock-bump")
                .await
                .map_err(|e| e.to_string())?;
            let clock = client
                .query_one(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
                    &[],
                )
                .await
                .map_err(|e| format!("clock_timestamp(): {e}"))?;
            let server_us: i64 = clock.get(0);
            let host = host_us();
            // The table appears with the first grant; before it, there is no lease.
            let row = client
                .query_opt(
                    "SELECT token, lock_until > now() FROM quorumlock_leases WHERE name = $1",
                    &[&RESOURCE],
                )
                .await
                .ok()
                .flatten();
            let lock = row.map(|r| {
                let token: i64 = r.get(0);
                let live: bool = r.get(1);
                format!("token {token}, {}", if live { "live" } else { "expired" })
            });
            let server_us = u64::try_from(server_us).unwrap_or(0);
            Ok(Look {
                // Only a live lease is the holder's mark.
                lock: lock.clone().filter(|l| l.ends_with("live")),
                seen: lock,
                offset_ms: clock_offset_ms(server_us / 1_000_000, server_us % 1_000_000, host),
            })
        }
        _ => Err("the clock shim does not reach these servers".to_owned()),
    }
}

fn host_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(lock: Option<&str>, offset_ms: i64) -> Look {
        Look {
            lock: lock.map(str::to_owned),
            seen: lock.map(str::to_owned),
            offset_ms,
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("master {i}")).collect()
    }

    /// Kleppmann's case: one master of the holder's bare majority steps, and only that one.
    #[test]
    fn a_step_proves_itself_on_the_stepped_servers_only() {
        let before = [look(Some("a"), 2), look(Some("a"), 1), look(None, 0)];
        let stepped = [look(None, 3999), look(Some("a"), 3), look(None, 1)];
        assert!(judge(&names(3), &[0], &before, &stepped, 4000, true).is_ok());
        // A shim not in effect: the key still there, the clock on time.
        let unshimmed = [look(Some("a"), 1), look(Some("a"), 3), look(None, 1)];
        assert!(judge(&names(3), &[0], &before, &unshimmed, 4000, true).is_err());
        // Another server's clock moved with it (a control file shared by every master):
        // not the fault the cell claims, whatever the stepped one shows.
        let all = [look(None, 3999), look(None, 3998), look(None, 3999)];
        let reading = judge(&names(3), &[0], &before, &all, 4000, true);
        assert!(
            reading.as_ref().is_err_and(|r| r.contains("moved too")),
            "{reading:?}"
        );
        // The holder's validity had ended: its key was gone for that reason.
        assert!(judge(&names(3), &[0], &before, &stepped, 4000, false).is_err());
    }
}
