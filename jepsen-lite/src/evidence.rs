//! Proof that each injected fault took effect, and the readings behind it.
//!
//! A must-hold verdict is only worth something if the faults it survived really happened: a
//! pause that never stopped the process, an iptables rule that matched no packet, a clock shim
//! the master never read, a proxy partition no byte crossed, all leave a run that "held" while
//! proving nothing. Every fault a run injects is recorded here with the reading that shows it
//! took effect (or why it did not); a fault without that reading fails the run.

use serde::Serialize;

/// One fault and what was read to show it took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultCheck {
    /// The fault and its target, as the timeline labels it (`pause node 2`).
    pub fault: String,
    /// The reading: what showed it took effect, or why it did not.
    pub reading: String,
    /// Whether it took effect.
    pub took_effect: bool,
}

/// Every fault of one run and its check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// In the order the faults were injected.
    pub checks: Vec<FaultCheck>,
}

impl Evidence {
    /// Records `fault` with the outcome of its check: `Ok(reading)` if it took effect,
    /// `Err(reading)` if not.
    pub fn record(&mut self, fault: impl Into<String>, check: Result<String, String>) {
        let (reading, took_effect) = match check {
            Ok(reading) => (reading, true),
            Err(reading) => (reading, false),
        };
        self.checks.push(FaultCheck {
            fault: fault.into(),
            reading,
            took_effect,
        });
    }

    /// How many faults were injected.
    pub fn injected(&self) -> usize {
        self.checks.len()
    }

    /// How many were shown to take effect.
    pub fn proven(&self) -> usize {
        self.checks.iter().filter(|c| c.took_effect).count()
    }

    /// The faults that did not take effect.
    pub fn unproven(&self) -> impl Iterator<Item = &FaultCheck> {
        self.checks.iter().filter(|c| !c.took_effect)
    }
}

/// Whether the `stat` line of a process (`/proc/<pid>/stat`) shows it stopped (`T`, or `t`
/// when traced). The state follows the command name, which is in parentheses and may itself
/// hold spaces or parentheses.
pub fn stopped_in_stat(stat: &str) -> bool {
    stat.rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next())
        .is_some_and(|state| state == "T" || state == "t")
}

/// Whether process `pid` is stopped (SIGSTOP took effect).
pub fn process_stopped(pid: u32) -> Result<String, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    if stopped_in_stat(&stat) {
        Ok(format!("pid {pid} in state T"))
    } else {
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .unwrap_or("?");
        Err(format!("pid {pid} in state {state}, not stopped"))
    }
}

/// Whether process `pid` has exited (a zombie not yet reaped, or gone): a stop cannot reach it.
pub fn process_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// The packets the loopback `DROP` rules matching `port` (as source or destination) counted,
/// from `iptables -L INPUT -v -x -n` output.
pub fn dropped_packets(listing: &str, port: u16) -> u64 {
    let dport = format!("dpt:{port}");
    let sport = format!("spt:{port}");
    listing
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2) == Some(&"DROP")
                && fields
                    .iter()
                    .any(|f| *f == dport.as_str() || *f == sport.as_str())
        })
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// A master's clock offset against this host's, in milliseconds, from its `TIME` reply
/// (seconds, microseconds) and the host's wall clock read just after it (microseconds since
/// the Unix epoch).
pub fn clock_offset_ms(secs: u64, micros: u64, host_us: u64) -> i64 {
    let master_us = secs.saturating_mul(1_000_000).saturating_add(micros);
    let diff = i128::from(master_us) - i128::from(host_us);
    i64::try_from(diff / 1000).unwrap_or(i64::MAX)
}

/// Whether a measured clock offset shows a shim offset of `expected_ms` in effect: within a
/// tolerance for the time between reading the master and the host (and scheduling delays on a
/// loaded box), at most a quarter of the offset.
pub fn offset_took_effect(measured_ms: i64, expected_ms: i64) -> bool {
    let tolerance = (expected_ms.abs() / 4).max(200);
    (measured_ms - expected_ms).abs() <= tolerance
}

#[cfg(test)]
mod tests {
    /// A running process has not exited; one that is gone has.
    #[test]
    fn exited_processes_are_told_apart() {
        assert!(!super::process_exited(std::process::id()));
        assert!(super::process_exited(u32::MAX - 1));
        // A child that exited and was not reaped yet: a zombie.
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !super::process_exited(child.id()) {
            assert!(std::time::Instant::now() < deadline, "true never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().expect("reap");
    }

    use super::*;

    #[test]
    fn stopped_state_is_read_after_the_command_name() {
        assert!(stopped_in_stat("42 (redis-server) T 1 42 42 0 -1"));
        assert!(stopped_in_stat("42 (a (weird) name) t 1"));
        assert!(!stopped_in_stat("42 (redis-server) S 1 42 42 0 -1"));
        // A name ending in " T" must not fool it.
        assert!(!stopped_in_stat("42 (x T) R 1"));
        assert!(!stopped_in_stat("garbage"));
    }

    #[test]
    fn dropped_packets_sum_the_matching_drop_rules() {
        let listing = "\
Chain INPUT (policy ACCEPT 0 packets, 0 bytes)
    pkts      bytes target     prot opt in     out     source               destination
      12      720 DROP       6    --  lo     *       0.0.0.0/0            0.0.0.0/0            tcp dpt:6380
       3      180 DROP       6    --  lo     *       0.0.0.0/0            0.0.0.0/0            tcp spt:6380 statistic mode random probability 0.20000000000
       9      540 DROP       6    --  lo     *       0.0.0.0/0            0.0.0.0/0            tcp dpt:6381
       5      300 ACCEPT     6    --  lo     *       0.0.0.0/0            0.0.0.0/0            tcp dpt:6380
";
        assert_eq!(dropped_packets(listing, 6380), 15);
        assert_eq!(dropped_packets(listing, 6381), 9);
        assert_eq!(dropped_packets(listing, 6382), 0);
        // Port 638 must not match 6380.
        assert_eq!(dropped_packets(listing, 638), 0);
    }

    #[test]
    fn clock_offsets_are_read_and_judged() {
        let host = 1_700_000_000_000_000;
        assert_eq!(clock_offset_ms(1_700_000_008, 0, host), 8000);
        assert_eq!(clock_offset_ms(1_699_999_992, 500_000, host), -7500);
        assert!(offset_took_effect(8040, 8000));
        assert!(offset_took_effect(-7950, -8000));
        assert!(!offset_took_effect(3, 8000), "a shim not in effect");
        assert!(!offset_took_effect(8000, -8000), "the wrong way");
    }

    #[test]
    fn evidence_counts_what_took_effect() {
        let mut evidence = Evidence::default();
        assert_eq!((evidence.injected(), evidence.proven()), (0, 0));
        evidence.record("pause node 1", Ok("pid 7 in state T".into()));
        evidence.record("drop node 2", Err("0 packets dropped".into()));
        assert_eq!((evidence.injected(), evidence.proven()), (2, 1));
        let unproven: Vec<_> = evidence.unproven().map(|c| c.fault.as_str()).collect();
        assert_eq!(unproven, ["drop node 2"]);
    }
}
