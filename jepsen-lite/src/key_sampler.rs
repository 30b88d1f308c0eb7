//! The key sampler: while a random run's faults come and go, a thread of the harness reads
//! every [`EVERY`] which lock keys each master holds and how long each has left (`PTTL`), so
//! that a key a failed round left behind during a fault is seen before it expires. The reads
//! go to the masters directly (not through the clients' proxy) and give up after
//! [`PROBE_TIMEOUT`], so a paused master or one cut by iptables is skipped, not waited for.
//! [`crate::leaks`] judges what they saw.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use quorumlock_testkit::{query_port, Reply};
use serde_json::json;

use crate::history::{Event, Kind, Process};

/// How often each master is read: several times per TTL (2 s in the random runs), so that a
/// key left to expire is seen many times.
pub const EVERY: Duration = Duration::from_millis(200);

/// How long one read may take before that master is skipped for this sweep.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// The process name of the sampler's events in the history.
pub const SAMPLER: &str = "sampler";

/// The event a read of master `node` records, sent at `sent_ns` and answered at `time_ns`:
/// `keys` lists the resources whose lock key the master held, each with its `PTTL` in ms (`-1`
/// for a key without expiry).
pub fn sample_event(time_ns: u64, sent_ns: u64, node: usize, keys: &[(String, i64)]) -> Event {
    Event::at(
        time_ns,
        Process::Named(SAMPLER.into()),
        Kind::Info,
        "keys",
        json!({"node": node, "sent_ns": sent_ns, "keys": keys}),
    )
}

/// Returns every key's `PTTL` in one request: `-2` for a missing key.
const PTTLS: &str =
    "local r = {} for i, k in ipairs(KEYS) do r[i] = redis.call('PTTL', k) end return r";

/// A running sampler; [`stop`](Self::stop) ends it and returns its events.
#[derive(Debug)]
pub struct KeySampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Event>>>,
}

impl KeySampler {
    /// Starts reading the masters on `ports` (in node order) for `keys`: each a lock key and
    /// the resource it locks.
    pub fn start(ports: Vec<u16>, keys: Vec<(String, String)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut events = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                for (node, &port) in ports.iter().enumerate() {
                    if let Some(event) = read(node, port, &keys) {
                        events.push(event);
                    }
                }
                std::thread::sleep(EVERY);
            }
            events
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the sampler and returns what it read.
    pub fn stop(mut self) -> Vec<Event> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for KeySampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One read of master `node`, or `None` when it did not answer in time (down, paused, cut) or
/// answered something else than a list of `PTTL`s.
fn read(node: usize, port: u16, keys: &[(String, String)]) -> Option<Event> {
    let sent_ns = crate::clock::now_ns();
    let count = keys.len().to_string();
    let mut args = vec!["EVAL", PTTLS, count.as_str()];
    args.extend(keys.iter().map(|(key, _)| key.as_str()));
    let Ok(Reply::Array(pttls)) = query_port(port, &args, PROBE_TIMEOUT) else {
        return None;
    };
    let time_ns = crate::clock::now_ns();
    let mut present = Vec::new();
    for ((_, resource), pttl) in keys.iter().zip(pttls) {
        match pttl {
            Reply::Integer(-2) => {}
            Reply::Integer(ms) => present.push((resource.clone(), ms)),
            _ => return None,
        }
    }
    Some(sample_event(time_ns, sent_ns, node, &present))
}
