//! Kernel faults on loopback: `iptables` rules that drop every packet to a port (a partition
//! TCP retransmits through) or a random share of them (packet loss below TCP).

use std::process::Stdio;

/// One iptables rule on loopback input that a run may put in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Drop every packet to `port` (a kernel partition).
    Drop(u16),
    /// Drop a random [`LOSS_PROBABILITY`] share of the packets to `port` (requests).
    LossTo(u16),
    /// Drop a random share of the packets from `port` (a node's replies).
    LossFrom(u16),
}

/// The share of packets a loss rule drops.
pub const LOSS_PROBABILITY: &str = "0.2";

/// The iptables match that picks a random `LOSS_PROBABILITY` share of packets.
const RANDOM_SHARE: [&str; 6] = [
    "-m",
    "statistic",
    "--mode",
    "random",
    "--probability",
    LOSS_PROBABILITY,
];

impl Rule {
    fn args(self) -> Vec<String> {
        let mut a: Vec<String> = ["INPUT", "-i", "lo", "-p", "tcp"]
            .iter()
            .map(ToString::to_string)
            .collect();
        let (dir, port, lossy) = match self {
            Self::Drop(p) => ("--dport", p, false),
            Self::LossTo(p) => ("--dport", p, true),
            Self::LossFrom(p) => ("--sport", p, true),
        };
        a.extend([dir.to_string(), port.to_string()]);
        if lossy {
            a.extend(RANDOM_SHARE.iter().map(ToString::to_string));
        }
        a.extend(["-j".to_string(), "DROP".to_string()]);
        a
    }
}

/// Adds (`add`) or deletes one loopback rule.
pub fn apply(add: bool, rule: Rule) -> std::io::Result<()> {
    let status = std::process::Command::new("iptables")
        .arg(if add { "-I" } else { "-D" })
        .args(rule.args())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "iptables failed for {rule:?}"
        )))
    }
}

/// Whether the `statistic` match works: a rule without a target (it only counts packets, so
/// it affects no traffic) is inserted and deleted again.
pub fn statistic_available() -> bool {
    let probe = |op: &str| {
        std::process::Command::new("iptables")
            .args([op, "INPUT", "-i", "lo", "-p", "tcp", "--dport", "9"])
            .args(RANDOM_SHARE)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    probe("-I") && probe("-D")
}

/// The loopback input rules with their packet counters (`iptables -L INPUT -v -x -n`).
pub fn listing() -> Result<String, String> {
    let out = std::process::Command::new("iptables")
        .args(["-L", "INPUT", "-v", "-x", "-n"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("iptables -L exited with {}", out.status))
    }
}

/// Whether `iptables` can be run here at all.
pub fn available() -> bool {
    std::process::Command::new("iptables")
        .args(["-L", "INPUT", "-n"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_rules_match_a_random_share_and_drop() {
        let args = Rule::LossFrom(6380).args().join(" ");
        assert!(args.contains("--sport 6380"));
        assert!(args.contains("--probability 0.2"));
        assert!(args.ends_with("-j DROP"));
        let drop = Rule::Drop(6381).args().join(" ");
        assert!(drop.contains("--dport 6381") && !drop.contains("statistic"));
    }
}
