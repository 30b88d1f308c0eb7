//! Overlapping grants a holder's fault does not explain. Under a client pause, a partition or
//! a clock bump inside its section, the stale holder's grant may overlap the grants after it
//! (the fenced register judges what it then does); two grants the fault did not touch must never overlap, or the lock did not
//! exclude at all, whatever the fenced register rejected. Likewise, the rejections that make a
//! clock bump **caught** are the faulted holder's own.

use jepsen_lite::checker::Overlap;
use jepsen_lite::history::{Event, Process};
use jepsen_lite::resource::{Access, Register};

/// The nemesis events that mark a holder's fault (made by the worker, or by the nemesis inside
/// its section: a clock bump), naming the lease it holds.
pub(super) const HOLDER_FAULTS: [&str; 3] = ["pause-client", "partition", "clock-bump"];

/// The leases held by a worker when it made a holder's fault.
pub(super) fn faulted_leases(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e.process == Process::nemesis() && HOLDER_FAULTS.contains(&e.f.as_str()))
        .filter_map(|e| e.str_field("lease"))
        .collect()
}

/// The overlaps between two grants neither of which a holder's fault touched.
pub(super) fn unexplained<'a>(overlaps: &'a [Overlap], events: &[Event]) -> Vec<&'a Overlap> {
    let faulted = faulted_leases(events);
    overlaps
        .iter()
        .filter(|o| !faulted.contains(&o.first.as_str()) && !faulted.contains(&o.second.as_str()))
        .collect()
}

/// How many accesses the fenced register rejected under a lease a holder's fault touched: the
/// stale accesses the fault was meant to make, on which a verdict of caught must rest.
pub(super) fn faulted_rejections(accesses: &[Access], events: &[Event]) -> usize {
    let faulted = faulted_leases(events);
    accesses
        .iter()
        .filter(|a| a.register == Register::Fenced && !a.accepted)
        .filter(|a| faulted.contains(&a.lease.as_str()))
        .count()
}

#[cfg(test)]
mod tests {
    use jepsen_lite::checker::{self, Params};
    use jepsen_lite::history::{Event, Kind, Process};
    use jepsen_lite::resource::RegisterState;
    use serde_json::json;

    use super::*;

    const MS: u64 = 1_000_000;

    fn grant(ms: u64, client: u32, lease: &str, token: u64) -> Event {
        Event::at(
            ms * MS,
            Process::Client(client),
            Kind::Ok,
            "acquire",
            json!({"lease": lease, "resource": "r", "token": token, "valid_until_ns": u64::MAX}),
        )
    }

    fn release(ms: u64, client: u32, lease: &str) -> Event {
        Event::at(
            ms * MS,
            Process::Client(client),
            Kind::Invoke,
            "release",
            json!({"lease": lease}),
        )
    }

    fn overlaps(events: &[Event]) -> Vec<Overlap> {
        let params = Params {
            epsilon_ns: MS,
            liveness_bound_ns: 10_000 * MS,
        };
        let none = RegisterState::default();
        checker::check(events, &[], &none, &none, &params)
            .claims
            .overlaps
    }

    fn write(client: u32, lease: &str, accepted: bool) -> Access {
        Access {
            time_ns: 0,
            client,
            lease: lease.to_owned(),
            op: jepsen_lite::resource::Op::Write,
            register: Register::Fenced,
            token: Some(1),
            accepted,
            counter: 0,
            add: Some(1),
        }
    }

    /// Only the fenced register's rejections of the faulted holder count.
    #[test]
    fn only_the_faulted_holders_rejections_count() {
        let events = [Event::at(
            MS,
            Process::nemesis(),
            Kind::Info,
            "clock-bump",
            json!({"lease": "1-7", "nodes": [0], "offset_ms": 4000}),
        )];
        let mut unfenced = write(1, "1-7", false);
        unfenced.register = Register::Unfenced;
        let others = [write(0, "0-3", false), write(1, "1-7", true), unfenced];
        assert_eq!(faulted_rejections(&others, &events), 0);
        assert_eq!(
            faulted_rejections(&[write(0, "0-3", false), write(1, "1-7", false)], &events),
            1
        );
    }

    /// A paused holder's grant overlapping the grants after its session expired is the
    /// fault's; two other grants overlapping, with tokens in order (so that the fenced
    /// register would have caught the stale writes), is a lock that does not exclude.
    #[test]
    fn only_the_faulted_grant_may_overlap() {
        let mut events = vec![
            grant(0, 0, "0-1", 1),
            Event::at(
                MS,
                Process::nemesis(),
                Kind::Info,
                "pause-client",
                json!({"client": 0, "lease": "0-1"}),
            ),
            grant(3000, 1, "1-1", 2),
            release(3010, 1, "1-1"),
            grant(3020, 2, "2-1", 3),
            release(3030, 2, "2-1"),
            release(4100, 0, "0-1"),
        ];
        let seen = overlaps(&events);
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(unexplained(&seen, &events).is_empty());
        events.extend([
            grant(5000, 1, "1-2", 4),
            grant(5001, 2, "2-2", 5),
            release(5010, 1, "1-2"),
            release(5011, 2, "2-2"),
        ]);
        let seen = overlaps(&events);
        let stray = unexplained(&seen, &events);
        assert_eq!(stray.len(), 1, "{seen:?}");
        assert_eq!(
            (stray[0].first.as_str(), stray[0].second.as_str()),
            ("1-2", "2-2")
        );
        // Without the lease on the fault's event, nothing is excused.
        let unnamed: Vec<Event> = events
            .iter()
            .cloned()
            .map(|mut e| {
                if e.f == "pause-client" {
                    e.value = json!({"client": 0});
                }
                e
            })
            .collect();
        assert_eq!(unexplained(&seen, &unnamed).len(), 3);
    }
}
