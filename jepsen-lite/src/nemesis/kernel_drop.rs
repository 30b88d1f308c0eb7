//! Faults below TCP, by iptables rules on loopback: every packet to a master's port dropped
//! (a kernel partition, which TCP retransmits through after it ends), a random share of the
//! packets to and from every master dropped (loss), and a master cut off for a while by a rule
//! a timer removes. Proven, before a rule goes (its counters go with it), by the packets it
//! dropped; lifted by deleting the rules.

use std::time::Duration;

use super::iptables::{self, Rule};
use super::{Error, Nemesis, Pending, Targets};
use crate::evidence::dropped_packets;

impl Nemesis {
    /// Lifts the drops and the loss: their rules are deleted (after [`prove`] read them).
    ///
    /// # Errors
    ///
    /// When a rule cannot be deleted.
    pub(super) fn delete_rules(&mut self) -> Result<(), Error> {
        for rule in std::mem::take(&mut self.rules) {
            iptables::apply(false, rule)?;
        }
        Ok(())
    }

    /// Drops every packet to master `n`'s port until the faults are lifted.
    pub(super) fn kernel_drop(
        &mut self,
        t: &Targets<'_>,
        n: usize,
        label: String,
    ) -> Result<(), Error> {
        let port = t.masters.ports()[n];
        iptables::apply(true, Rule::Drop(port))?;
        self.rules.push(Rule::Drop(port));
        self.pending.push(Pending::Rules {
            label,
            ports: vec![port],
        });
        Ok(())
    }

    /// Drops a random share of the packets to and from every master until the faults are
    /// lifted: below TCP, on this run's master ports only (the proxy's upstream leg carries all
    /// of this run's lock traffic), both directions.
    pub(super) fn loss(&mut self, t: &Targets<'_>, label: String) -> Result<(), Error> {
        for port in t.masters.ports() {
            for rule in [Rule::LossTo(port), Rule::LossFrom(port)] {
                iptables::apply(true, rule)?;
                self.rules.push(rule);
            }
        }
        self.pending.push(Pending::Rules {
            label,
            ports: t.masters.ports(),
        });
        Ok(())
    }

    /// Cuts master `node` (port `port`) off for `cut_for` by a rule a timer thread removes, to
    /// be proven by the thread's reading of the rule's counters when the fault ends.
    pub(super) fn drop_for(
        &mut self,
        node: usize,
        port: u16,
        cut_for: Duration,
    ) -> Result<(), Error> {
        let rule = Rule::Drop(port);
        iptables::apply(true, rule)?;
        let timer = std::thread::spawn(move || {
            std::thread::sleep(cut_for);
            let packets = iptables::listing().map(|l| dropped_packets(&l, port));
            let deleted = iptables::apply(false, rule);
            match (packets, deleted) {
                (Ok(p), Ok(())) if p > 0 => Ok(format!("{p} packets dropped, then let through")),
                (Ok(p), Ok(())) => Err(format!("{p} packets matched")),
                (Err(e), _) => Err(format!("cannot read the counters: {e}")),
                (_, Err(e)) => Err(format!("the rule could not be removed: {e}")),
            }
        });
        self.pending.push(Pending::TimedDrop {
            label: format!("iptables drop node {node} for {cut_for:?}"),
            timer,
            rule,
        });
        Ok(())
    }
}

/// The proof of drop rules on `ports`, from a `listing` of the rules' counters read before
/// they go.
pub(super) fn prove(
    listing: Option<&Result<String, String>>,
    ports: &[u16],
) -> Result<String, String> {
    match listing {
        Some(Ok(listing)) => {
            let packets: u64 = ports.iter().map(|&p| dropped_packets(listing, p)).sum();
            if packets > 0 {
                Ok(format!("{packets} packets dropped"))
            } else {
                Err("0 packets matched".to_string())
            }
        }
        Some(Err(e)) => Err(format!("cannot read the counters: {e}")),
        None => Err("no counters read".to_string()),
    }
}

/// Removes iptables rules when dropped, so that an interrupted run leaves none behind.
#[derive(Debug, Default)]
struct InstalledRules(Vec<Rule>);

impl Drop for InstalledRules {
    fn drop(&mut self) {
        for rule in self.0.drain(..) {
            let _ = iptables::apply(false, rule);
        }
    }
}

/// Drops every packet to `ports` for `cut_for`, then lifts the rules (the workloads'
/// partition of masters): the number of packets each rule dropped, read before it goes.
///
/// # Errors
///
/// A rule could not be installed (none is left installed, and there is no wait), or the
/// counters could not be read.
pub async fn partition(ports: &[u16], cut_for: Duration) -> Result<Vec<u64>, String> {
    let mut rules = InstalledRules::default();
    let mut failed = None;
    for &port in ports {
        match iptables::apply(true, Rule::Drop(port)) {
            Ok(()) => rules.0.push(Rule::Drop(port)),
            Err(e) => failed = Some(format!("iptables: {e}")),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    tokio::time::sleep(cut_for).await;
    let listing = iptables::listing();
    drop(rules);
    let listing = listing?;
    Ok(ports
        .iter()
        .map(|&p| dropped_packets(&listing, p))
        .collect())
}
