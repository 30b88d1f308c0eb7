//! Readers kept out by a waiting writer: a read permit is refused on a master while a writer's
//! intent exists there (the acquire script checks it), so no reader's permit key can appear on
//! a master beside an intent that stood throughout.
//!
//! * `reader-past-intent`: the masters' data, read every [`EVERY`]: a read permit key whose
//!   value was not there at the previous read, beside the same writer intent (same value) at
//!   both reads, where no fault touched that master in between (a restart may bring back a
//!   snapshot's permit). The writer's own permits (one value on every permit it took) are not
//!   a reader's.
//!
//! The intent decides who waits, not who holds (a writer takes every read permit), so a reader
//! let in past it breaks no exclusion: it starves the writer, which only the masters' data
//! shows.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::history::History;
use super::host::Served;
use crate::keyspace::Data;

/// How often the masters are read (as the key-lifetime checker does).
pub const EVERY: Duration = super::lifetime::EVERY;

/// The key prefix of the workload's managers and the library's reserved marker after it.
const RESERVED: &[u8] = b"\x1f";

/// What one read of one master found: per read-write lock, its intent's value and its read
/// permits' values.
#[derive(Default)]
struct Seen {
    intents: BTreeMap<Vec<u8>, Vec<u8>>,
    permits: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// The checker of one run.
pub struct IntentAudit {
    masters: Vec<Rc<Served>>,
    next_read: Duration,
    last: Vec<(Duration, Seen)>,
}

/// A key of `name`'s read-write lock: its intent (`None`) or read permit `Some(key)`.
fn parse(key: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let prefix = quorumlock::defaults::KEY_PREFIX.as_bytes();
    let reserved = key.strip_prefix(prefix)?.strip_prefix(RESERVED)?;
    if let Some(name) = reserved.strip_prefix(b"write-intent:") {
        return Some((name.to_vec(), None));
    }
    let rest = reserved.strip_prefix(b"read:")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    Some((rest[colon + 1..].to_vec(), Some(key.to_vec())))
}

impl IntentAudit {
    /// The checker of `masters`' data.
    pub fn new(masters: Vec<Rc<Served>>) -> Self {
        let last = masters
            .iter()
            .map(|_| (Duration::ZERO, Seen::default()))
            .collect();
        Self {
            masters,
            next_read: EVERY,
            last,
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
            let mut seen = Seen::default();
            {
                let mut master = served.master.borrow_mut();
                for (key, entry) in master.keyspace().iter() {
                    if entry.expires_at.is_some_and(|at| now_ms > at) {
                        continue;
                    }
                    let (Some((name, permit)), Data::Str(value)) = (parse(key), &entry.data) else {
                        continue;
                    };
                    match permit {
                        None => {
                            seen.intents.insert(name, value.clone());
                        }
                        Some(key) => {
                            seen.permits
                                .entry(name)
                                .or_default()
                                .insert(key, value.clone());
                        }
                    }
                }
            }
            let (then, before) = std::mem::replace(&mut self.last[m], (now, seen));
            let seen = &self.last[m].1;
            let faulted = history
                .faults
                .iter()
                .any(|w| w.master == m && w.client.is_none() && w.from <= now && w.to >= then);
            if faulted {
                continue;
            }
            for (name, intent) in &seen.intents {
                if before.intents.get(name) != Some(intent) {
                    continue;
                }
                let Some(permits) = seen.permits.get(name) else {
                    continue;
                };
                let earlier = before.permits.get(name);
                for (key, value) in permits {
                    let new = earlier.and_then(|p| p.get(key)) != Some(value);
                    let writers = permits.values().filter(|v| *v == value).count() > 1;
                    if new && !writers {
                        history.violation(
                            now,
                            "reader-past-intent",
                            format_args!(
                                "m{m} {} set between {} and {} µs beside the intent of {}",
                                String::from_utf8_lossy(key).escape_debug(),
                                then.as_micros(),
                                now.as_micros(),
                                String::from_utf8_lossy(name).escape_debug(),
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn intents_and_read_permits_are_told_by_name() {
        assert_eq!(
            parse(b"quorumlock:\x1fwrite-intent:rw"),
            Some((b"rw".to_vec(), None))
        );
        assert_eq!(
            parse(b"quorumlock:\x1fread:3:rw"),
            Some((b"rw".to_vec(), Some(b"quorumlock:\x1fread:3:rw".to_vec())))
        );
        assert_eq!(parse(b"quorumlock:\x1fpermit:0:sem"), None);
        assert_eq!(parse(b"quorumlock:rw"), None);
    }
}
