//! Packet loss below TCP: for a while, iptables drops a random share of the loopback packets
//! to and from the subject's client ports (the servers' side of every client's link, so every
//! client's requests and replies), and nothing else: the members' peer ports and every other
//! port are untouched. A second rule on the same ports only counts, so that the proof says
//! how many packets were dropped out of how many.

use std::time::Duration;

use jepsen_lite::nemesis::iptables::LOSS_PROBABILITY;
use serde_json::json;

use super::rules::Rules;
use super::workload::{Made, Recorder};

/// Drops a random [`LOSS_PROBABILITY`] share of the packets to and from `ports` for `length`;
/// the reading is the drop rule's counter, which must be above zero.
pub(super) async fn packet_loss(ports: &[u16], recorder: &Recorder, length: Duration) -> Made {
    let fault = format!(
        "drop {}% of the packets to and from ports {ports:?} for {length:?}",
        percent()
    );
    let list = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let on_ports: Vec<String> = ["-i", "lo", "-p", "tcp", "-m", "multiport", "--ports", &list]
        .map(str::to_owned)
        .to_vec();
    let mut lossy = on_ports.clone();
    lossy.extend(
        [
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            LOSS_PROBABILITY,
        ]
        .map(str::to_owned),
    );
    let mut rules = Rules::new();
    let installed = rules
        .insert("filter", "INPUT", &lossy, &["-j", "DROP"])
        // Above the drop: it sees every packet.
        .and_then(|drop| Ok((drop, rules.insert("filter", "INPUT", &on_ports, &[])?)));
    let (drop, count) = match installed {
        Ok(tags) => tags,
        Err(e) => return (fault, Err(e)),
    };
    recorder.nemesis(
        "loss",
        json!({"ports": ports, "probability": LOSS_PROBABILITY, "how": "iptables statistic"}),
    );
    tokio::time::sleep(length).await;
    let dropped = rules.packets(&drop);
    let seen = rules.packets(&count);
    let removed = rules.remove();
    recorder.nemesis("heal", json!({}));
    let reading = match (dropped, seen, removed) {
        (_, _, Err(e)) => Err(format!("the rules could not be removed: {e}")),
        (Ok(dropped), Ok(seen), Ok(())) if dropped > 0 => Ok(format!(
            "{dropped} of {seen} packets dropped ({:.0}%), then the rules removed",
            100.0 * dropped as f64 / seen.max(1) as f64
        )),
        (Ok(dropped), Ok(seen), Ok(())) => Err(format!("{dropped} of {seen} packets dropped")),
        (Err(e), _, _) | (_, Err(e), _) => Err(format!("cannot read the counters: {e}")),
    };
    (fault, reading)
}

fn percent() -> f64 {
    LOSS_PROBABILITY.parse::<f64>().unwrap_or(0.0) * 100.0
}
