//! No key left beyond its bound: the masters' data, read every [`EVERY`] of simulated time
//! while the run goes on and once more at its end, against what the library may leave there.
//!
//! * `key-bound`: every key is one the library makes (a lock key, a permit, a slot's running
//!   key or record, a fence counter, restart protection's epoch marker and provisioning
//!   record), and each has the expiry its kind must have: a lock key at most the longest TTL a
//!   request may set (the manager's `max_ttl`), a slot record at most the claim TTL plus the
//!   retention, a fence counter at most the fence retention; only the epoch marker and the
//!   provisioning record may live forever.
//! * `orphan-key`: a lock key whose value an operation drew (see `seams`) is still on a master
//!   [`GRACE`] after that operation ended (failed, released, dropped), and no fault touched that
//!   master, or that client's link to it, between the operation's call and the sighting (plus
//!   [`SLACK`]): its cleanup or release reached a healthy master and did not delete it. What a
//!   fault excuses (a cleanup that could not reach the master, a request landing late, data
//!   restored from before a release) is left to expire, under `key-bound`.
//! * `key-after-heal`: once the last fault is over by [`SLACK`] and the last operation ended,
//!   plus the longest TTL (or a record's bound), and the run is over, no lock key and no slot
//!   record is left at all.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use super::history::History;
use super::host::Served;
use super::scheduled;
use super::seams::SimWorld;
use super::workload::MAX_TTL;
use crate::keyspace::{Data, Entry};

/// How often the masters are read: several times within the shortest TTL a failed round's keys
/// can have (10 ms - 1 s), so that most leaks are seen before they expire.
pub const EVERY: Duration = Duration::from_millis(50);
/// How long after its operation ended a key may still be there on a healthy master: a failed
/// round's cleanup and a dropped call's are sent in the background, and a release's deletes
/// may still be in flight when it returns (a round trip on a healthy link is under 5 ms; the
/// node timeout is 50 ms).
pub const GRACE: Duration = Duration::from_millis(100);
/// How long after a fault was lifted what it held back may still land: bytes held on a link
/// are delivered at once, bytes on a slow link up to its latency (300 ms at most) later.
pub const SLACK: Duration = Duration::from_millis(400);

/// The key prefix the workload's managers use (the library's default).
const PREFIX: &[u8] = quorumlock::defaults::KEY_PREFIX.as_bytes();

/// What a key is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A lock key, permit, writer intent, slot running key, election announcement: a TTL of
    /// at most the manager's `max_ttl`.
    Lock,
    /// A slot's record: the claim TTL plus the retention, at most.
    SlotRecord,
    /// A record of a job of the scheduler's fleet, kept longer (see `scheduled`).
    FleetRecord,
    /// A fence counter: the fence retention, at most.
    Fence,
    /// The epoch marker, the provisioning record: no expiry needed.
    Forever,
    /// Nothing the library makes.
    Unknown,
}

fn classify(key: &[u8]) -> Class {
    let Some(name) = key.strip_prefix(PREFIX) else {
        return Class::Unknown;
    };
    let Some(reserved) = name.strip_prefix(b"\x1f") else {
        return Class::Lock;
    };
    let starts = |p: &[u8]| reserved.starts_with(p);
    if reserved
        .strip_prefix(b"slot-record:")
        .is_some_and(scheduled::in_fleet)
    {
        Class::FleetRecord
    } else if starts(b"slot-record:") {
        Class::SlotRecord
    } else if starts(b"fence:") {
        Class::Fence
    } else if reserved == b"epoch" || reserved == b"provisioned" {
        Class::Forever
    } else if [
        &b"permit:"[..],
        b"read:",
        b"write-intent:",
        b"slot:",
        b"leader:",
        b"holds:",
    ]
    .iter()
    .any(|p| starts(p))
    {
        Class::Lock
    } else {
        Class::Unknown
    }
}

/// The longest TTL (ms) a key of `class` may have, `None` for one that may live forever; `Err`
/// for a key the library never makes.
fn bound_ms(class: Class) -> Result<Option<i64>, ()> {
    let ms = |d: Duration| Some(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    match class {
        Class::Lock => Ok(ms(MAX_TTL)),
        Class::SlotRecord => Ok(ms(super::slots::RECORD_BOUND)),
        Class::FleetRecord => Ok(ms(scheduled::FLEET_RECORD_BOUND)),
        Class::Fence => Ok(ms(quorumlock::defaults::FENCE_RETENTION)),
        Class::Forever => Ok(None),
        Class::Unknown => Err(()),
    }
}

/// What is wrong with the expiry of `key` (of `entry`) at `now_ms` on its master's clock.
fn out_of_bound(key: &[u8], entry: &Entry, now_ms: i64) -> Option<String> {
    let class = classify(key);
    match (bound_ms(class), entry.expires_at) {
        (Err(()), _) => Some("a key the library does not make".into()),
        (Ok(None), _) => None,
        (Ok(Some(_)), None) => Some(format!("{class:?} key without expiry")),
        (Ok(Some(bound)), Some(at)) => (at - now_ms > bound)
            .then(|| format!("{class:?} key with {} ms left, bound {bound}", at - now_ms)),
    }
}

/// A lock key seen on `master` after the operation that drew its value had ended.
struct Suspect {
    master: usize,
    op: u32,
    seen: Duration,
    key: String,
}

/// The key-lifetime checker of one run.
pub struct KeyAudit {
    masters: Vec<Rc<Served>>,
    world: Rc<SimWorld>,
    next_read: Duration,
    suspects: Vec<Suspect>,
    /// (master, operation) pairs already suspected: the first sighting is the one judged (the
    /// one with the fewest faults to excuse it).
    suspected: BTreeSet<(usize, u32)>,
    /// (master, key) pairs already reported out of bound.
    reported: BTreeSet<(usize, Vec<u8>)>,
}

impl KeyAudit {
    /// The checker of `masters`' data, attributing lock values through `world`.
    pub fn new(masters: Vec<Rc<Served>>, world: Rc<SimWorld>) -> Self {
        Self {
            masters,
            world,
            next_read: EVERY,
            suspects: Vec::new(),
            suspected: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }

    /// Called between simulation steps at simulated time `now`: reads every master's data
    /// every [`EVERY`].
    pub fn step(&mut self, now: Duration, history: &mut History) {
        if now < self.next_read {
            return;
        }
        self.next_read = now + EVERY;
        for (m, served) in self.masters.iter().enumerate() {
            let now_ms = served.clock_at(now).millis();
            let mut master = served.master.borrow_mut();
            for (key, entry) in master.keyspace().iter() {
                if entry.expires_at.is_some_and(|at| now_ms > at) {
                    continue;
                }
                if let Some(wrong) = out_of_bound(key, entry, now_ms) {
                    if self.reported.insert((m, key.to_vec())) {
                        history.violation(
                            now,
                            "key-bound",
                            format_args!(
                                "m{m} {}: {wrong}",
                                String::from_utf8_lossy(key).escape_debug()
                            ),
                        );
                    }
                    continue;
                }
                let Data::Str(value) = &entry.data else {
                    continue;
                };
                if classify(key) != Class::Lock {
                    continue;
                }
                let Some(op) = self.world.drawn_by(value) else {
                    continue;
                };
                let ended = history.ops.get(op as usize).and_then(|o| o.end);
                if ended.is_some_and(|end| now >= end + GRACE) && self.suspected.insert((m, op)) {
                    self.suspects.push(Suspect {
                        master: m,
                        op,
                        seen: now,
                        key: String::from_utf8_lossy(key).escape_debug().to_string(),
                    });
                }
            }
        }
    }

    /// At the end of the run (simulated time `end`): judges the keys seen after their
    /// operations ended against the faults, and what the masters still hold once every fault
    /// is long over.
    pub fn finish(&mut self, end: Duration, history: &mut History) {
        for suspect in std::mem::take(&mut self.suspects) {
            let Some(op) = history.ops.get(suspect.op as usize).cloned() else {
                continue;
            };
            let excused = history.faults.iter().any(|w| {
                w.master == suspect.master
                    && w.client.is_none_or(|c| c == op.client)
                    && w.from <= suspect.seen
                    && op.start <= w.to.saturating_add(SLACK)
            });
            if !excused {
                history.violation(
                    suspect.seen,
                    "orphan-key",
                    format_args!(
                        "m{} {} of c{}'s operation {} ({} - {} µs) still there",
                        suspect.master,
                        suspect.key,
                        op.client,
                        suspect.op,
                        op.start.as_micros(),
                        op.end.unwrap_or_default().as_micros(),
                    ),
                );
            }
        }
        let Some(healed) = history.healed else {
            return;
        };
        let quiet = history
            .faults
            .iter()
            .map(|w| w.to)
            .filter(|&to| to != Duration::MAX)
            .fold(healed, Duration::max);
        // A slot's record is kept the retention after its run ended, which may be after the
        // heal (a run kept by its lease): the last operation's end counts as a fault's.
        let last_op = history.ops.iter().filter_map(|o| o.end).max();
        let settled = (quiet + SLACK).max(last_op.unwrap_or_default());
        let longest = MAX_TTL
            .max(super::slots::RECORD_BOUND)
            .max(scheduled::FLEET_RECORD_BOUND);
        let at = (settled + longest + Duration::from_millis(50)).max(end);
        for (m, served) in self.masters.iter().enumerate() {
            let then_ms = served.clock_at(at).millis();
            let mut master = served.master.borrow_mut();
            for (key, entry) in master.keyspace().iter() {
                let alive = entry.expires_at.is_none_or(|x| then_ms <= x);
                let class = classify(key);
                if alive && matches!(class, Class::Lock | Class::SlotRecord | Class::FleetRecord) {
                    history.violation(
                        at,
                        "key-after-heal",
                        format_args!(
                            "m{m} {} expires at {:?} ms, after {} ms",
                            String::from_utf8_lossy(key).escape_debug(),
                            entry.expires_at,
                            then_ms
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(expires_at: Option<i64>) -> Entry {
        Entry {
            data: Data::Str(b"v".to_vec()),
            expires_at,
        }
    }

    #[test]
    fn keys_are_classified_by_name() {
        assert_eq!(classify(b"quorumlock:l3"), Class::Lock);
        assert_eq!(classify(b"quorumlock:\x1fpermit:0:sem"), Class::Lock);
        assert_eq!(classify(b"quorumlock:\x1fslot:1:j:4"), Class::Lock);
        assert_eq!(
            classify(b"quorumlock:\x1fslot-record:1:j:4"),
            Class::SlotRecord
        );
        assert_eq!(
            classify(b"quorumlock:\x1fslot-record:5:retry:4"),
            Class::FleetRecord
        );
        assert_eq!(classify(b"quorumlock:\x1ffence:l3"), Class::Fence);
        assert_eq!(classify(b"quorumlock:\x1fepoch"), Class::Forever);
        assert_eq!(classify(b"quorumlock:\x1fnonsense"), Class::Unknown);
        assert_eq!(classify(b"other:l3"), Class::Unknown);
    }

    #[test]
    fn a_lock_key_needs_an_expiry_within_max_ttl() {
        let max = MAX_TTL.as_millis() as i64;
        let key = b"quorumlock:l1";
        assert_eq!(out_of_bound(key, &entry(Some(1000 + max)), 1000), None);
        assert!(out_of_bound(key, &entry(Some(1001 + max)), 1000).is_some());
        assert!(out_of_bound(key, &entry(None), 1000).is_some());
        assert_eq!(
            out_of_bound(b"quorumlock:\x1fepoch", &entry(None), 1000),
            None
        );
        assert!(out_of_bound(b"stray", &entry(Some(1001)), 1000).is_some());
    }
}
