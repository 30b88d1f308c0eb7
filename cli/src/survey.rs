//! One read of every master about one lock key, through connections of its own: who answered,
//! which hold the key, for how long, as whom. What `status` prints, and what `exec`, `elect`
//! and `clear` add to their messages so that every node is named, not only those that
//! decided a round.

use std::time::Duration;

use quorumlock::{EpochMarker, Inspection, NodeError, NodeErrorKind};
use serde::Serialize;

use crate::args::Connection;
use crate::duration::show;

/// How long the survey may take, every node at once (each request is also bounded by the node
/// timeout, and a connection by the connect timeout).
const DEADLINE: Duration = Duration::from_secs(2);

/// Every node's answers, in the order of `--nodes`.
pub(crate) struct Survey {
    /// The lock key read.
    pub(crate) key: String,
    pub(crate) nodes: Vec<NodeReport>,
    pub(crate) quorum: usize,
}

/// One node's answers.
#[derive(Debug, Serialize)]
pub(crate) struct NodeReport {
    /// The URL, password redacted.
    pub(crate) node: String,
    /// Why the node could not be read; all other fields are `null` then.
    pub(crate) error: Option<String>,
    /// Whether the node answered with an error no retry fixes (refused credentials, a key of
    /// another type): it is up, but unusable until the configuration changes.
    #[serde(skip)]
    pub(crate) refused: bool,
    /// Round-trip time of one `PING`, in milliseconds.
    pub(crate) rtt_ms: Option<f64>,
    /// Whether the lock key exists.
    pub(crate) held: Option<bool>,
    /// The key's remaining time to live, in milliseconds (`null` when absent or without expiry).
    pub(crate) ttl_ms: Option<u64>,
    /// The holder's identity stored in the lock value, if any (never the value itself: it is
    /// the holder's secret).
    pub(crate) identity: Option<String>,
    /// `missing` (no marker: never used, or restarted without its data), `provisioned`, or
    /// `stamped` (created at a first acquisition).
    pub(crate) epoch: Option<&'static str>,
    /// Age of the epoch marker by the node's own clock, in milliseconds (`null` unless stamped).
    pub(crate) epoch_age_ms: Option<u64>,
}

/// Reads the lock key of `resource` on every node at once.
///
/// Cancel safety: read-only; cancelling it leaves nothing behind.
pub(crate) async fn survey(
    locks: &quorumlock::Redlock,
    conn: &Connection,
    resource: &str,
) -> Survey {
    let key = format!("{}{}", conn.key_prefix, resource);
    let names: Vec<String> = locks.node_names().map(str::to_string).collect();
    let nodes = match tokio::time::timeout(DEADLINE, locks.inspect_lock(resource)).await {
        Ok(Ok(inspections)) => inspections.iter().map(report).collect(),
        Ok(Err(error)) => names
            .into_iter()
            .map(|n| failed(n, error.to_string()))
            .collect(),
        Err(_) => {
            let why = format!("no answer within {}", show(DEADLINE));
            names.into_iter().map(|n| failed(n, why.clone())).collect()
        }
    };
    Survey {
        key,
        nodes,
        quorum: locks.quorum(),
    }
}

impl Survey {
    /// How many nodes answered.
    pub(crate) fn answered(&self) -> usize {
        self.nodes.iter().filter(|n| n.error.is_none()).count()
    }

    /// How many nodes hold the key.
    pub(crate) fn held_on(&self) -> usize {
        self.nodes.iter().filter(|n| n.held == Some(true)).count()
    }

    /// Whether the nodes that refused the configuration leave too few others for a quorum:
    /// waiting cannot help, only a change of configuration (or of the key) can.
    pub(crate) fn is_misconfigured(&self) -> bool {
        let refused = self.nodes.iter().filter(|n| n.refused).count();
        refused > 0 && self.nodes.len() - refused < self.quorum
    }

    /// Whether a quorum of nodes hold the key: someone else has the lock, whatever the last
    /// round of a wait that ran out saw (a timeout under load, a pause of the masters' writes).
    pub(crate) fn held_by_a_quorum(&self) -> bool {
        self.held_on() >= self.quorum
    }

    /// Whether a quorum answered.
    pub(crate) fn has_quorum(&self) -> bool {
        self.answered() >= self.quorum
    }

    /// `held` (the key exists on a quorum), `unknown` (it might: the nodes that did not answer
    /// could make a quorum with those that hold it), `free` (on no node) or `partial`.
    pub(crate) fn state(&self) -> &'static str {
        let (held_on, unanswered) = (self.held_on(), self.nodes.len() - self.answered());
        if held_on >= self.quorum {
            "held"
        } else if held_on + unanswered >= self.quorum {
            "unknown"
        } else if held_on == 0 {
            "free"
        } else {
            "partial"
        }
    }

    /// The holder's identity found on the most nodes (the first such on a tie), if any.
    pub(crate) fn owner(&self) -> Option<String> {
        most_common(self.nodes.iter().filter_map(|n| n.identity.as_deref()))
    }

    /// Who holds the key, in words: `"host-a"`, or that a plain lock names nobody.
    pub(crate) fn holder(&self) -> String {
        match self.owner() {
            Some(identity) => format!("{identity:?}"),
            None => "a holder that did not say who (plain locks carry no identity)".into(),
        }
    }

    /// The longest remaining TTL among the nodes that hold the key.
    pub(crate) fn expires_in(&self) -> Option<Duration> {
        self.nodes
            .iter()
            .filter_map(|n| n.ttl_ms)
            .max()
            .map(Duration::from_millis)
    }

    /// One line per node: what it holds, or why it could not be read.
    pub(crate) fn node_lines(&self) -> Vec<String> {
        self.nodes.iter().map(NodeReport::describe).collect()
    }

    /// The nodes that could not be read, with why, on one line.
    pub(crate) fn unreachable(&self) -> String {
        let failed: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| Some(format!("{}: {}", n.node, n.error.as_ref()?)))
            .collect();
        failed.join("; ")
    }
}

impl NodeReport {
    /// What the node holds, or why it could not be read, in words.
    pub(crate) fn describe(&self) -> String {
        let what = match (&self.error, self.held) {
            (Some(error), _) if self.refused => format!("refused: {error}"),
            (Some(error), _) => format!("unreachable: {error}"),
            (None, Some(true)) => {
                let by = match &self.identity {
                    Some(identity) => format!(" by {identity:?}"),
                    None => String::new(),
                };
                match self.ttl_ms {
                    Some(ms) => format!("held{by}, expires in {}", show(Duration::from_millis(ms))),
                    None => format!("held{by}, no expiry"),
                }
            }
            (None, _) => "free".into(),
        };
        format!("{}: {what}", self.node)
    }
}

/// A node's report from the library's inspection.
fn report(inspection: &Inspection) -> NodeReport {
    let mut report = failed(inspection.node().to_string(), String::new());
    match inspection.seen() {
        Ok(state) => {
            report.error = None;
            report.rtt_ms = Some(state.rtt.as_micros() as f64 / 1000.0);
            report.held = Some(state.held);
            report.ttl_ms = state.remaining.map(|r| r.as_millis() as u64);
            report.identity = state.identity.clone();
            let (epoch, age) = match state.epoch {
                EpochMarker::Missing => ("missing", None),
                EpochMarker::Provisioned => ("provisioned", None),
                EpochMarker::Stamped(age) => ("stamped", Some(age.as_millis() as u64)),
                EpochMarker::Unreadable => ("unreadable", None),
            };
            report.epoch = Some(epoch);
            report.epoch_age_ms = age;
        }
        Err(error) => {
            report.error = Some(error.to_string().to_lowercase());
            report.refused = is_refusal(error);
        }
    }
    report
}

/// Whether `error` is one that no retry fixes: credentials refused, or a server error such as
/// `WRONGTYPE` (the criterion `failure::code` applies to a whole round).
pub(crate) fn is_refusal(error: &NodeError) -> bool {
    match error.kind() {
        NodeErrorKind::Auth(_) => true,
        NodeErrorKind::Server(_) => !error.is_retryable(),
        _ => false,
    }
}

/// A node that could not be read, and why.
fn failed(node: String, error: String) -> NodeReport {
    NodeReport {
        node,
        error: Some(error),
        refused: false,
        rtt_ms: None,
        held: None,
        ttl_ms: None,
        identity: None,
        epoch: None,
        epoch_age_ms: None,
    }
}

/// The identity found on the most nodes (the first such on a tie), if any.
fn most_common<'a>(identities: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for identity in identities {
        match counts.iter_mut().find(|(seen, _)| *seen == identity) {
            Some((_, count)) => *count += 1,
            None => counts.push((identity, 1)),
        }
    }
    let most = counts.iter().map(|(_, count)| *count).max()?;
    counts
        .into_iter()
        .find(|(_, count)| *count == most)
        .map(|(identity, _)| identity.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_of_held_keys_is_held_by_a_quorum() {
        let node = |held: bool| NodeReport {
            error: None,
            held: Some(held),
            ..failed("redis://m".into(), String::new())
        };
        let survey = |held: &[bool]| Survey {
            key: "k".into(),
            nodes: held.iter().map(|&h| node(h)).collect(),
            quorum: 2,
        };
        assert!(survey(&[true, true, false]).held_by_a_quorum());
        assert!(!survey(&[true, false, false]).held_by_a_quorum());
    }

    #[test]
    fn the_owner_is_the_identity_on_the_most_nodes() {
        assert_eq!(most_common([].into_iter()), None);
        assert_eq!(
            most_common(["a", "b", "b"].into_iter()).as_deref(),
            Some("b")
        );
        assert_eq!(most_common(["a", "b"].into_iter()).as_deref(), Some("a"));
    }

    fn node(error: bool, held: bool) -> NodeReport {
        NodeReport {
            node: "n".into(),
            error: error.then(|| "down".into()),
            refused: false,
            rtt_ms: None,
            held: (!error).then_some(held),
            ttl_ms: None,
            identity: None,
            epoch: None,
            epoch_age_ms: None,
        }
    }

    #[test]
    fn a_state_the_silent_nodes_could_change_is_unknown() {
        let state = |nodes: Vec<NodeReport>| {
            Survey {
                key: "k".into(),
                nodes,
                quorum: 2,
            }
            .state()
        };
        assert_eq!(
            state(vec![
                node(true, false),
                node(true, false),
                node(true, false)
            ]),
            "unknown"
        );
        assert_eq!(
            state(vec![
                node(false, true),
                node(true, false),
                node(false, false)
            ]),
            "unknown"
        );
        assert_eq!(
            state(vec![
                node(false, false),
                node(true, false),
                node(false, false)
            ]),
            "free"
        );
        assert_eq!(
            state(vec![
                node(false, true),
                node(false, false),
                node(false, false)
            ]),
            "partial"
        );
        assert_eq!(
            state(vec![
                node(false, true),
                node(false, true),
                node(true, false)
            ]),
            "held"
        );
    }
}
