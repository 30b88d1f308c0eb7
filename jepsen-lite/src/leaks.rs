//! Lock keys left behind during faults: what the [key sampler](crate::key_sampler) read on the
//! masters while the faults came and went, judged against the clients' operations.
//!
//! After the faults lift, [`orphans_outlived_cleanup`](crate::verdict::orphans_outlived_cleanup)
//! sees any key a cleanup forgot; during a fault such a key expires unseen within one TTL.
//! Here every key the sampler saw on master `m` between `sent_ns` and its reply must be
//! explained by an operation on its resource that may still have a key on `m` then:
//!
//! * one not yet ended (an acquisition in flight, a lock held, a lease) or ended less than
//!   [`ORPHAN_GRACE`] before (its cleanup or release still on the way);
//! * one whose end may have left a key to expire, up to one TTL (and the drift and the grace)
//!   after that end: a grant not released with success (lost, released too late, crashed with
//!   it), an acquisition or release whose client was cut from `m`, paused, or delayed on its way
//!   to `m` meanwhile (then up to a TTL after that fault ended: a request held back may land
//!   late), or whose client counted a failed request to `m` by then (the library's per-node
//!   error counter, which each client event carries as `node_errors`);
//! * a reentrant acquisition that may have re-entered a key an earlier reentrant acquisition of
//!   its client left (that one may still have had a key there when it began): the re-entry
//!   refreshed the key's TTL, and the earlier member keeps it past the later release, up to a
//!   TTL after that release;
//! * a client that never said how an operation ended (killed, still stopped) is owed nothing
//!   after a TTL from its crash (or from the end of a fault on its path then), or at all while
//!   it may still run.
//!
//! Not judged: a master that crashed, restarted or had its clock faulted within three TTLs
//! (keys may come back from disk or outlive their TTL on a slowed clock). Still lets through:
//! a key left by a failed round while another operation on the same resource could explain
//! it (the sampler sees that a key is there, not whose it is), any key left on such a
//! master, and a key left on a master to which the client counted a failed request during the
//! operation, whatever failed (the counter is the client process's, over all its operations):
//! a library that released only on its granting quorum would leak there unseen.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::history::{Event, Kind, Process};
use crate::key_sampler::SAMPLER;
use crate::nemesis::Verb;
use crate::verdict::{fault_windows, faults_master, ORPHAN_GRACE};

/// What the sampler's reads showed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakReport {
    /// Reads of a master that answered.
    pub reads: usize,
    /// Keys those reads saw, over all reads.
    pub keys_seen: usize,
    /// Keys seen on a master that was not judged then (a crash, restart or clock fault).
    pub not_judged: usize,
    /// Keys no operation explains: left behind by a cleanup or release that never came.
    pub leaked: Vec<String>,
    /// Keys without an expiry, or with more than a TTL left.
    pub without_expiry: Vec<String>,
}

impl LeakReport {
    /// How many keys were wrongly there.
    pub fn violations(&self) -> usize {
        self.leaked.len() + self.without_expiry.len()
    }
}

/// One operation of a client on a resource: an acquisition and what followed it, by lease.
#[derive(Debug)]
struct Op<'a> {
    client: u32,
    resource: &'a str,
    start: u64,
    /// Its last event, if it said how it ended.
    end: Option<u64>,
    /// It ended leaving nothing to expire: a failed acquisition, or a release confirmed.
    clean: bool,
    /// The client's per-master failed requests at the start.
    errors_at_start: Option<Vec<u64>>,
    /// A reentrant acquisition: it re-enters, and refreshes the TTL of, a key its owner left.
    reentrant: bool,
}

/// Judges the sampler's reads in `events` (see the module docs); `ttl_ns` is the lock TTL.
pub fn leaked_keys(events: &[Event], ttl_ns: u64) -> LeakReport {
    let grace = u64::try_from(ORPHAN_GRACE.as_nanos()).unwrap_or(u64::MAX);
    // A key set at some moment expires at most this long after it.
    let lifetime = ttl_ns + ttl_ns / 100 + 2_000_000 + grace;
    let ops = operations(events);
    let errors = node_errors(events);
    let crashes = client_crashes(events);
    let mut by_resource: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        by_resource.entry(op.resource).or_default().push(i);
    }
    for list in by_resource.values_mut() {
        list.sort_by_key(|&i| ops[i].start);
    }
    let pauses = client_pauses(events);
    let mut report = LeakReport::default();
    let mut exempt_cache: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    let mut path_cache: HashMap<(u32, usize), Vec<(u64, u64)>> = HashMap::new();
    let mut bound_cache: HashMap<(&str, usize), Vec<u64>> = HashMap::new();
    let sampler = Process::Named(SAMPLER.into());
    for read in events
        .iter()
        .filter(|e| e.process == sampler && e.f == "keys")
    {
        let (Some(node), Some(sent)) = (read.u64_field("node"), read.u64_field("sent_ns")) else {
            continue;
        };
        let Ok(node) = usize::try_from(node) else {
            continue;
        };
        report.reads += 1;
        let keys: Vec<(String, i64)> = read
            .value
            .get("keys")
            .and_then(|k| serde_json::from_value(k.clone()).ok())
            .unwrap_or_default();
        if keys.is_empty() {
            continue;
        }
        report.keys_seen += keys.len();
        let exempt = exempt_cache
            .entry(node)
            .or_insert_with(|| node_exempt(events, node));
        if exempt
            .iter()
            .any(|&(a, b)| a <= read.time_ns && sent <= b.saturating_add(3 * lifetime))
        {
            report.not_judged += keys.len();
            continue;
        }
        for (resource, pttl) in keys {
            let ms = |ns: u64| ns as f64 / 1e6;
            if pttl == -1 || u64::try_from(pttl).is_ok_and(|p| p * 1_000_000 > ttl_ns) {
                report.without_expiry.push(format!(
                    "{resource} on master {node} at {:.0} ms: PTTL {pttl} ms",
                    ms(sent)
                ));
                continue;
            }
            let explained = by_resource
                .get_key_value(resource.as_str())
                .is_some_and(|(r, on)| {
                    let bounds = bound_cache.entry((*r, node)).or_insert_with(|| {
                        let mut bounds: Vec<u64> = Vec::with_capacity(on.len());
                        for (k, &i) in on.iter().enumerate() {
                            let op = &ops[i];
                            let path = path_cache
                                .entry((op.client, node))
                                .or_insert_with(|| path_faults(events, &pauses, op.client, node));
                            let own =
                                key_may_live_until(op, node, path, &errors, &crashes, lifetime);
                            bounds.push(own.max(refreshed_until(&ops, on, &bounds, k, lifetime)));
                        }
                        bounds
                    });
                    on.iter()
                        .zip(bounds.iter())
                        .any(|(&i, &bound)| ops[i].start <= read.time_ns && bound >= sent)
                });
            if !explained {
                report.leaked.push(format!(
                    "{resource} on master {node} at {:.0} ms, {pttl} ms left: no operation on it may still have a key there",
                    ms(sent)
                ));
            }
        }
    }
    report
}

/// Until when `op` may rightly have a key on master `node` (see the module docs).
fn key_may_live_until(
    op: &Op<'_>,
    node: usize,
    path: &[(u64, u64)],
    errors: &HashMap<u32, Vec<(u64, Vec<u64>)>>,
    crashes: &HashMap<u32, Vec<u64>>,
    lifetime: u64,
) -> u64 {
    let grace = u64::try_from(ORPHAN_GRACE.as_nanos()).unwrap_or(u64::MAX);
    let faults_until = |until: u64| -> Vec<u64> {
        path.iter()
            .filter(|&&(a, b)| a <= until && op.start <= b)
            .map(|&(_, b)| b)
            .collect()
    };
    let Some(end) = op.end else {
        // Never said how it ended: owed nothing a key's lifetime after its client crashed, or
        // after the faults on its path then ended (a request held back, or waiting in a paused
        // master's socket, still lands after the crash).
        let Some(&crashed) = crashes
            .get(&op.client)
            .and_then(|at| at.iter().find(|&&at| at >= op.start))
        else {
            return u64::MAX;
        };
        let last_fault = faults_until(crashed).into_iter().max().unwrap_or(0);
        return crashed.max(last_fault).saturating_add(lifetime);
    };
    let settled = end.saturating_add(grace);
    let faulted = faults_until(settled);
    let failed_request = || {
        let Some(before) = op.errors_at_start.as_ref().and_then(|e| e.get(node)) else {
            return true;
        };
        // The client's first word after its cleanup had time to fail.
        let after = errors
            .get(&op.client)
            .and_then(|seen| seen.iter().find(|(at, _)| *at >= settled))
            .and_then(|(_, e)| e.get(node));
        after.is_none_or(|after| after != before)
    };
    if op.clean && faulted.is_empty() && !failed_request() {
        return settled;
    }
    let last_fault = faulted.into_iter().max().unwrap_or(0);
    end.max(last_fault).saturating_add(lifetime)
}

/// Until when the `k`-th of the operations `on` (indices into `ops`, by start) may have kept a
/// key its owner left before: a reentrant acquisition re-enters an earlier reentrant
/// acquisition's key of the same client that may still be there (`bounds`: the earlier ones'),
/// and refreshes its TTL, so the key outlives its own release by the earlier one's member.
/// 0 when it cannot.
fn refreshed_until(ops: &[Op<'_>], on: &[usize], bounds: &[u64], k: usize, lifetime: u64) -> u64 {
    let op = &ops[on[k]];
    if !op.reentrant {
        return 0;
    }
    let grace = u64::try_from(ORPHAN_GRACE.as_nanos()).unwrap_or(u64::MAX);
    let stale = on[..k].iter().zip(bounds).any(|(&j, &bound)| {
        let prev = &ops[j];
        // Gone by the grace after its end: its release or cleanup deleted its key.
        let settled = prev.end.map_or(u64::MAX, |end| end.saturating_add(grace));
        prev.reentrant && prev.client == op.client && bound >= op.start && bound > settled
    });
    // One that never said how it ended is owed its crash's bound already.
    match op.end {
        Some(end) if stale => end.saturating_add(lifetime),
        _ => 0,
    }
}

/// Every client operation, by lease, in no particular order.
fn operations(events: &[Event]) -> Vec<Op<'_>> {
    let mut ops: HashMap<&str, Op<'_>> = HashMap::new();
    let mut ended: HashMap<&str, (bool, bool, bool)> = HashMap::new(); // (failed, granted, released)
    for e in events {
        let Process::Client(client) = e.process else {
            continue;
        };
        let Some(lease) = e.str_field("lease") else {
            continue;
        };
        if e.f == "acquire" && e.kind == Kind::Invoke {
            if let Some(resource) = e.str_field("resource") {
                ops.insert(
                    lease,
                    Op {
                        client,
                        resource,
                        start: e.time_ns,
                        end: None,
                        clean: false,
                        errors_at_start: errors_of(e),
                        reentrant: e.value.get("reentrant") == Some(&serde_json::Value::Bool(true)),
                    },
                );
            }
            continue;
        }
        let state = ended.entry(lease).or_default();
        match (e.f.as_str(), e.kind) {
            ("acquire", Kind::Fail) => state.0 = true,
            ("acquire", Kind::Ok) => state.1 = true,
            ("release", Kind::Ok) => state.2 = true,
            _ => {}
        }
        if let Some(op) = ops.get_mut(lease) {
            let terminal = matches!(
                (e.f.as_str(), e.kind),
                ("acquire", Kind::Fail | Kind::Info)
                    | ("release", Kind::Ok | Kind::Fail | Kind::Info)
                    | ("crash", _)
            );
            if terminal || op.end.is_some() {
                op.end = Some(op.end.unwrap_or(0).max(e.time_ns));
            }
        }
    }
    for (lease, op) in &mut ops {
        let (failed, granted, released) = ended.get(lease).copied().unwrap_or_default();
        op.clean = (failed && !granted) || (granted && released);
    }
    ops.into_values().collect()
}

/// A client event's `node_errors`: the library's failed requests per master so far.
fn errors_of(e: &Event) -> Option<Vec<u64>> {
    serde_json::from_value(e.value.get("node_errors")?.clone()).ok()
}

/// Each client's `node_errors` over time, in time order.
fn node_errors(events: &[Event]) -> HashMap<u32, Vec<(u64, Vec<u64>)>> {
    let mut seen: HashMap<u32, Vec<(u64, Vec<u64>)>> = HashMap::new();
    for e in events {
        if let (Process::Client(c), Some(errors)) = (&e.process, errors_of(e)) {
            seen.entry(*c).or_default().push((e.time_ns, errors));
        }
    }
    for list in seen.values_mut() {
        list.sort_by_key(|(at, _)| *at);
    }
    seen
}

/// When each client process crashed or was killed: its own `crash`, the nemesis's
/// `crash-client`.
fn client_crashes(events: &[Event]) -> HashMap<u32, Vec<u64>> {
    let mut crashes: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in events {
        let client = match &e.process {
            Process::Client(c) if e.f == "crash" => Some(*c),
            p if *p == Process::nemesis() && e.f == Verb::CrashClient.as_str() => {
                e.u64_field("client").and_then(|c| u32::try_from(c).ok())
            }
            _ => None,
        };
        if let Some(c) = client {
            crashes.entry(c).or_default().push(e.time_ns);
        }
    }
    for list in crashes.values_mut() {
        list.sort_unstable();
    }
    crashes
}

/// When each client was stopped: from the nemesis's `pause-client` or its own `pause` (after a
/// grant) to its `resume-client`, or the step's end for the nemesis's.
fn client_pauses(events: &[Event]) -> HashMap<u32, Vec<(u64, u64)>> {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| e.time_ns);
    let mut open: HashMap<u32, u64> = HashMap::new();
    let mut pauses: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    let client_of = |e: &Event| e.u64_field("client").and_then(|c| u32::try_from(c).ok());
    for e in sorted {
        match (&e.process, e.f.as_str()) {
            (Process::Client(c), "pause") => {
                open.entry(*c).or_insert(e.time_ns);
            }
            (p, "pause-client") if *p == Process::nemesis() => {
                if let Some(c) = client_of(e) {
                    open.entry(c).or_insert(e.time_ns);
                }
            }
            (p, "resume-client") if *p == Process::nemesis() => {
                if let Some((c, from)) = client_of(e).and_then(|c| open.remove_entry(&c)) {
                    pauses.entry(c).or_default().push((from, e.time_ns));
                }
            }
            _ => {}
        }
    }
    for (c, from) in open {
        pauses.entry(c).or_default().push((from, u64::MAX));
    }
    pauses
}

/// Whether nemesis event `e` acts on client `client`: it names it (`client`), lists it
/// (`clients`), says `"clients": "all"`, or names no client at all.
fn faults_client(e: &Event, client: u32) -> bool {
    if let Some(c) = e.u64_field("client") {
        return c == u64::from(client);
    }
    match e.value.get("clients") {
        Some(serde_json::Value::Array(list)) => {
            list.iter().any(|c| c.as_u64() == Some(u64::from(client)))
        }
        Some(serde_json::Value::String(all)) => all == "all",
        _ => true,
    }
}

/// The windows in which the path from `client` to master `node` was faulted (cut, delayed
/// past the node timeout, holding replies, lossy, the master paused or down) or the client
/// stopped.
fn path_faults(
    events: &[Event],
    pauses: &HashMap<u32, Vec<(u64, u64)>>,
    client: u32,
    node: usize,
) -> Vec<(u64, u64)> {
    // A client's pauses end at its `resume-client` (see `client_pauses`), not at the next
    // step's end, which may come long after a pause the client took itself, or never. The slow
    // client network (`"nodes": "all"`, below the node timeout) holds no request back past
    // the cleanup queued behind it.
    let mut windows = fault_windows(events, |verb, e| {
        let slow_network = verb == Verb::Delay && e.str_field("nodes") == Some("all");
        verb != Verb::PauseClient
            && !slow_network
            && faults_master(e, node)
            && faults_client(e, client)
    });
    windows.extend(pauses.get(&client).into_iter().flatten().copied());
    windows
}

/// When master `node` may hold keys a client could not account for: crashed, restarted (keys
/// back from disk), its clock faulted (a key outlives its TTL on a slowed or stepped-back
/// clock), or its disk tampered with. Each a window, or a moment as a window of no length.
fn node_exempt(events: &[Event], node: usize) -> Vec<(u64, u64)> {
    let mut windows = fault_windows(events, |verb, e| {
        matches!(
            verb,
            Verb::Kill | Verb::ClockBump | Verb::ClockRate | Verb::ClockStrobe
        ) && faults_master(e, node)
    });
    windows.extend(
        events
            .iter()
            .filter(|e| e.process == Process::nemesis())
            .filter(|e| {
                matches!(
                    Verb::parse(&e.f),
                    Some(
                        Verb::Restart
                            | Verb::SaveSnapshot
                            | Verb::TruncateAof
                            | Verb::Backup
                            | Verb::ExpireKeys
                    )
                ) && faults_master(e, node)
            })
            .map(|e| (e.time_ns, e.time_ns)),
    );
    windows
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::key_sampler::sample_event;

    const MS: u64 = 1_000_000;
    const TTL: u64 = 2000 * MS;

    fn client(t: u64, c: u32, kind: Kind, f: &str, value: serde_json::Value) -> Event {
        Event::at(t * MS, Process::Client(c), kind, f, value)
    }

    fn nemesis(t: u64, verb: Verb, value: serde_json::Value) -> Event {
        Event::at(t * MS, Process::nemesis(), Kind::Info, verb.as_str(), value)
    }

    /// Client 1's failed acquisition of `r` from 1000 to 1100 ms, its error counters unchanged
    /// before and after (a later event at 3000 ms says so).
    fn failed_acquisition() -> Vec<Event> {
        vec![
            client(
                1000,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0, 0, 0]}),
            ),
            client(
                1100,
                1,
                Kind::Fail,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0, 0, 0]}),
            ),
            client(
                3000,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-1", "resource": "s", "node_errors": [0, 0, 0]}),
            ),
        ]
    }

    fn read(t: u64, node: usize, keys: &[(&str, i64)]) -> Event {
        let keys: Vec<(String, i64)> = keys.iter().map(|(r, p)| ((*r).to_string(), *p)).collect();
        sample_event(t * MS + MS, t * MS, node, &keys)
    }

    fn judge(mut events: Vec<Event>) -> LeakReport {
        events.sort_by_key(|e| e.time_ns);
        leaked_keys(&events, TTL)
    }

    /// A key still there well after a failed acquisition ended on a master its client could
    /// reach is a leak; during the acquisition, or within the grace after, it is not.
    #[test]
    fn a_key_left_by_a_failed_round_is_a_leak() {
        let mut events = failed_acquisition();
        events.push(read(1050, 0, &[("r", 1950)]));
        events.push(read(1300, 0, &[("r", 1700)]));
        assert_eq!(judge(events.clone()).violations(), 0);
        events.push(read(2000, 0, &[("r", 1000)]));
        let report = judge(events);
        assert_eq!(report.leaked.len(), 1, "{report:?}");
        assert_eq!(report.reads, 3);
    }

    /// The same key is explained when the client was cut from that master meanwhile (until a
    /// lifetime after the cut ended), when its client counted a failed request to that master,
    /// or while another client holds the resource.
    #[test]
    fn a_key_the_client_could_not_delete_is_not_a_leak() {
        let mut cut = failed_acquisition();
        cut.push(nemesis(
            900,
            Verb::Partition,
            json!({"clients": [1], "nodes": [0]}),
        ));
        cut.push(nemesis(1200, Verb::PartitionEnd, json!({})));
        cut.push(read(2000, 0, &[("r", 1000)]));
        assert_eq!(judge(cut.clone()).violations(), 0);
        // Another master, reachable all along, is judged.
        cut.push(read(2000, 1, &[("r", 1000)]));
        assert_eq!(judge(cut.clone()).leaked.len(), 1);
        // A lifetime after the cut ended, the key is owed to no one.
        cut.retain(|e| e.process != Process::Named(SAMPLER.into()));
        cut.push(read(4000, 0, &[("r", 50)]));
        assert_eq!(judge(cut).leaked.len(), 1);

        let mut failed = failed_acquisition();
        failed[2].value["node_errors"] = json!([1, 0, 0]);
        failed.push(read(2000, 0, &[("r", 1000)]));
        failed.push(read(2000, 1, &[("r", 1000)]));
        let report = judge(failed);
        assert_eq!(report.leaked.len(), 1, "only master 1's key: {report:?}");
        assert!(report.leaked[0].contains("master 1"), "{report:?}");

        let mut held = failed_acquisition();
        held.push(client(
            1500,
            2,
            Kind::Invoke,
            "acquire",
            json!({"lease": "2-0", "resource": "r", "node_errors": [0, 0, 0]}),
        ));
        held.push(client(
            1510,
            2,
            Kind::Ok,
            "acquire",
            json!({"lease": "2-0", "resource": "r"}),
        ));
        held.push(read(2000, 0, &[("r", 1500)]));
        assert_eq!(judge(held.clone()).violations(), 0);
        // Released with success at 2100: its key too must be gone half a second later.
        held.push(client(
            2100,
            2,
            Kind::Ok,
            "release",
            json!({"lease": "2-0", "node_errors": [0, 0, 0]}),
        ));
        held.push(read(2800, 0, &[("r", 700)]));
        // Until the client says its counters after the release, a failed delete is possible.
        assert_eq!(judge(held.clone()).violations(), 0);
        held.push(client(
            2700,
            2,
            Kind::Invoke,
            "acquire",
            json!({"lease": "2-1", "resource": "s", "node_errors": [0, 0, 0]}),
        ));
        assert_eq!(judge(held).leaked.len(), 1);
    }

    /// A grant never released with success (lost, crashed) may leave its key for one TTL; so
    /// may a client that was stopped, and an operation whose client never said how it ended
    /// until a TTL after the client crashed.
    #[test]
    fn keys_that_may_rightly_live_out_their_ttl() {
        let lost = vec![
            client(
                1000,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0]}),
            ),
            client(
                1010,
                1,
                Kind::Ok,
                "acquire",
                json!({"lease": "1-0", "resource": "r"}),
            ),
            client(1500, 1, Kind::Fail, "release", json!({"lease": "1-0"})),
            read(3000, 0, &[("r", 500)]),
        ];
        assert_eq!(judge(lost.clone()).violations(), 0);
        let mut late = lost;
        late.push(read(4100, 0, &[("r", 10)]));
        assert_eq!(judge(late).leaked.len(), 1, "past a TTL after the release");

        let mut paused = failed_acquisition();
        paused.push(nemesis(1050, Verb::PauseClient, json!({"client": 1})));
        paused.push(nemesis(1090, Verb::ResumeClient, json!({"client": 1})));
        paused.push(read(2000, 0, &[("r", 1000)]));
        assert_eq!(judge(paused).violations(), 0);

        let killed = vec![
            client(
                1000,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0]}),
            ),
            nemesis(1010, Verb::CrashClient, json!({"client": 1})),
            read(2500, 0, &[("r", 500)]),
        ];
        assert_eq!(judge(killed.clone()).violations(), 0);
        let mut later = killed;
        later.push(read(3600, 0, &[("r", 10)]));
        assert_eq!(judge(later).leaked.len(), 1);
    }

    /// A key without expiry, or with more than a TTL left, is always wrong, except on a master
    /// whose clock or data was tampered with: that master is not judged for three lifetimes.
    #[test]
    fn keys_without_expiry_and_masters_not_judged() {
        let mut events = failed_acquisition();
        events.push(read(1050, 0, &[("r", -1)]));
        events.push(read(1060, 1, &[("r", 2500)]));
        assert_eq!(judge(events.clone()).without_expiry.len(), 2);
        events.push(nemesis(500, Verb::ClockBump, json!({"node": 0})));
        events.push(nemesis(700, Verb::Heal, json!({})));
        events.push(nemesis(600, Verb::Restart, json!({"node": 1})));
        let report = judge(events);
        assert_eq!(report.violations(), 0, "{report:?}");
        assert_eq!(report.not_judged, 2);
    }

    /// A client's own pause (the watcher records it as `pause-client`) ends at its
    /// `resume-client`: it does not exempt the client's later operations until a later step's
    /// end, or for ever when none follows.
    #[test]
    fn a_pause_exempts_until_its_resume_only() {
        let mut events = failed_acquisition();
        events.push(nemesis(
            500,
            Verb::PauseClient,
            json!({"client": 1, "how": "itself, after a grant"}),
        ));
        events.push(nemesis(700, Verb::ResumeClient, json!({"client": 1})));
        events.push(read(2000, 0, &[("r", 1000)]));
        let report = judge(events);
        assert_eq!(report.leaked.len(), 1, "{report:?}");
    }

    /// The slow client network (a delay of a few tens of ms to every master, below the node
    /// timeout) holds no request back past its cleanup: it exempts nothing.
    #[test]
    fn a_slow_client_network_exempts_nothing() {
        let mut events = failed_acquisition();
        events.push(nemesis(
            900,
            Verb::Delay,
            json!({"clients": [1, 2], "nodes": "all", "ms": 30}),
        ));
        events.push(nemesis(3000, Verb::PartitionEnd, json!({})));
        events.push(read(2000, 0, &[("r", 1000)]));
        let report = judge(events);
        assert_eq!(report.leaked.len(), 1, "{report:?}");
    }

    /// Client `client`'s reentrant acquisition `lease` of `r` and its release, in four events
    /// at `at` (acquire invoked and granted, release invoked and confirmed), each with the
    /// client's failed requests to master 0 (of three) at that moment.
    fn reentrant_hold(client_id: u32, lease: &str, at: [u64; 4], errors: [u64; 4]) -> Vec<Event> {
        let steps = [
            (Kind::Invoke, "acquire"),
            (Kind::Ok, "acquire"),
            (Kind::Invoke, "release"),
            (Kind::Ok, "release"),
        ];
        steps
            .iter()
            .zip(at.iter().zip(errors))
            .map(|(&(kind, f), (&t, e))| {
                let mut value = json!({"lease": lease, "node_errors": [e, 0, 0]});
                if f == "acquire" {
                    value["resource"] = json!("r");
                }
                if kind == Kind::Invoke && f == "acquire" {
                    value["reentrant"] = json!(true);
                }
                client(t, client_id, kind, f, value)
            })
            .collect()
    }

    /// A reentrant acquisition re-enters (and refreshes the TTL of) its owner's key left on a
    /// master by an earlier release that could not reach it: after its own clean release, the
    /// earlier acquisition's member keeps the key until a TTL after the re-entry. Not so for
    /// acquisitions that are not reentrant.
    #[test]
    fn a_reentry_may_refresh_a_key_its_owner_left() {
        let mut events = vec![nemesis(
            900,
            Verb::Partition,
            json!({"clients": [1], "nodes": [0]}),
        )];
        // The first release counts a failed request to master 0: its DEL never got there.
        events.extend(reentrant_hold(
            1,
            "1-0",
            [1000, 1010, 1030, 1040],
            [0, 1, 1, 2],
        ));
        events.push(nemesis(1200, Verb::PartitionEnd, json!({})));
        events.extend(reentrant_hold(
            1,
            "1-1",
            [2500, 2510, 2520, 2530],
            [2, 2, 2, 2],
        ));
        events.extend([
            client(
                3100,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-2", "resource": "s", "node_errors": [2, 0, 0]}),
            ),
            // Refreshed at 2510 by the re-entry: there until 4510.
            read(4000, 0, &[("r", 500)]),
        ]);
        let report = judge(events.clone());
        assert_eq!(report.violations(), 0, "{report:?}");
        for e in &mut events {
            if let Some(fields) = e.value.as_object_mut() {
                fields.remove("reentrant");
            }
        }
        assert_eq!(judge(events).leaked.len(), 1);
    }

    /// An operation cut off by its process's crash may leave a key up to a lifetime after the
    /// faults on its path ended: its request waited in a paused master's socket until the
    /// master resumed.
    #[test]
    fn a_request_of_a_crashed_client_may_land_after_the_crash() {
        let events = vec![
            nemesis(900, Verb::Pause, json!({"node": 0})),
            client(
                1000,
                1,
                Kind::Invoke,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0, 0, 0]}),
            ),
            client(
                1010,
                1,
                Kind::Ok,
                "acquire",
                json!({"lease": "1-0", "resource": "r", "node_errors": [0, 0, 0]}),
            ),
            // Another loop of the process crashes it while holding.
            client(
                1020,
                1,
                Kind::Info,
                "crash",
                json!({"lease": "1-1", "resource": "s", "node_errors": [0, 0, 0]}),
            ),
            nemesis(2500, Verb::Resume, json!({"node": 0})),
            nemesis(2510, Verb::PartitionEnd, json!({})),
            // The SET ran at 2500: the key lives until 4500.
            read(4000, 0, &[("r", 500)]),
        ];
        let report = judge(events);
        assert_eq!(report.violations(), 0, "{report:?}");
    }
}
