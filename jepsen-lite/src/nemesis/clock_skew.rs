//! Faults on the masters' wall clocks, through the clock shim: a jump on one master, every
//! master running fast, one master's clock strobing back and forth, and a master that falls
//! behind (its clock jumps back while it is cut off, so that it misses the grants meanwhile).
//! A jump is proven at once by the master's `TIME`; a rate when it ends, by the offset gained.
//! Lifted by resetting the clocks.

use std::time::{Duration, Instant};

use quorumlock_testkit::{RedisMaster, Reply};
use serde_json::json;

use super::{Error, Nemesis, Pending, Targets, Verb};
use crate::evidence::{clock_offset_ms, offset_took_effect};

impl Nemesis {
    /// Lifts every clock fault: each master's clock is back to the host's (a strobe's task is
    /// stopped when its fault is settled).
    ///
    /// # Errors
    ///
    /// When a clock cannot be reset.
    pub(super) fn reset_clocks(&self, t: &Targets<'_>) -> Result<(), Error> {
        if let Some(clocks) = &self.clocks {
            for port in t.masters.ports() {
                clocks.reset(port)?;
            }
        }
        Ok(())
    }

    /// Master `node`'s clock jumps by `offset_ms`, proven at once.
    pub(super) fn clock_bump(
        &mut self,
        t: &Targets<'_>,
        node: usize,
        offset_ms: i64,
        label: String,
    ) -> Result<(), Error> {
        let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
        clocks.set(t.masters.ports()[node], offset_ms, 0)?;
        let check = prove_offset(&t.masters[node], node, offset_ms, "");
        self.evidence.record(label, check);
        Ok(())
    }

    /// Every master's clock runs `ppm` fast, proven when the fault ends.
    pub(super) fn clock_rate(
        &mut self,
        t: &Targets<'_>,
        ppm: i64,
        label: String,
    ) -> Result<(), Error> {
        let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
        for port in t.masters.ports() {
            clocks.set(port, 0, ppm)?;
        }
        self.pending.push(Pending::ClockRate {
            label,
            ppm,
            since: Instant::now(),
        });
        Ok(())
    }

    /// Master `node`'s clock swings between `+offset_ms` and `-offset_ms` every 40 ms until
    /// the fault ends; proven at once by the first swing.
    pub(super) fn clock_strobe(
        &mut self,
        t: &Targets<'_>,
        node: usize,
        offset_ms: i64,
        label: String,
    ) -> Result<(), Error> {
        let clocks = self.clocks.clone().ok_or("clock shim unavailable")?;
        let port = t.masters.ports()[node];
        clocks.set(port, offset_ms, 0)?;
        let check = prove_offset(&t.masters[node], node, offset_ms, " on the first swing");
        self.evidence.record(label, check);
        let task = tokio::spawn(async move {
            let mut sign = -1;
            loop {
                tokio::time::sleep(Duration::from_millis(40)).await;
                let _ = clocks.set(port, sign * offset_ms, 0);
                sign = -sign;
            }
        });
        self.pending.push(Pending::Strobe { task });
        Ok(())
    }

    /// Master `node` falls behind: cut off for `cut_for` (proven when the fault ends) while
    /// its clock jumps back by `offset_ms` (proven at once).
    pub(super) fn lagging_master(
        &mut self,
        t: &Targets<'_>,
        node: usize,
        offset_ms: i64,
        cut_for: Duration,
        label: String,
    ) -> Result<(), Error> {
        if self.clocks.is_none() {
            return Err("clock shim unavailable".into());
        }
        let port = t.masters.ports()[node];
        self.drop_for(node, port, cut_for)?;
        let clocks = self.clocks.as_ref().ok_or("clock shim unavailable")?;
        clocks.set(port, offset_ms, 0)?;
        let check = prove_offset(&t.masters[node], node, offset_ms, "");
        self.evidence.record(label, check);
        self.record(
            Verb::Partition,
            json!({"node": node, "how": "iptables DROP", "for_ms": u64::try_from(cut_for.as_millis()).unwrap_or(u64::MAX)}),
        );
        Ok(())
    }
}

/// Whether master `node`'s `TIME` shows it `offset_ms` off (`how` adds to the reading).
fn prove_offset(
    master: &RedisMaster,
    node: usize,
    offset_ms: i64,
    how: &str,
) -> Result<String, String> {
    tokio::task::block_in_place(|| {
        clock_offset(master, node).and_then(|measured| {
            if offset_took_effect(measured, offset_ms) {
                Ok(format!("node {node} TIME {measured} ms off{how}"))
            } else {
                Err(format!(
                    "node {node} TIME {measured} ms off, expected {offset_ms}"
                ))
            }
        })
    })
}

/// Whether node 0's clock gained about what running `ppm` fast `since` then gives.
pub(super) fn prove_rate(t: &Targets<'_>, ppm: i64, since: Instant) -> Result<String, String> {
    let elapsed_ms = i64::try_from(since.elapsed().as_millis()).unwrap_or(0);
    let expected = elapsed_ms.saturating_mul(ppm) / 1_000_000;
    tokio::task::block_in_place(|| clock_offset(&t.masters[0], 0)).and_then(|measured| {
        if measured >= expected / 2 && expected > 0 {
            Ok(format!("node 0 {measured} ms ahead after {elapsed_ms} ms"))
        } else {
            Err(format!(
                "node 0 {measured} ms ahead after {elapsed_ms} ms, expected about {expected}"
            ))
        }
    })
}

/// How far master `n`'s wall clock (its `TIME`) runs ahead of this host's, in ms.
pub fn clock_offset(master: &RedisMaster, n: usize) -> Result<i64, String> {
    let reply = master
        .query(&["TIME"])
        .map_err(|e| format!("TIME on node {n}: {e}"))?;
    let host_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let field = |i: usize| -> Option<u64> {
        match &reply {
            Reply::Array(items) => match items.get(i) {
                Some(Reply::Bulk(b)) => String::from_utf8_lossy(b).parse().ok(),
                _ => None,
            },
            _ => None,
        }
    };
    match (field(0), field(1)) {
        (Some(secs), Some(micros)) => Ok(clock_offset_ms(secs, micros, host_us)),
        _ => Err(format!("TIME on node {n} gave {reply:?}")),
    }
}
