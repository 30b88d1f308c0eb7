//! One read of every master about one lock key, through connections of its own: who answered,
//! which hold the key, for how long, as whom. What `status` prints, and what `exec`, `elect`
//! and `clear` add to their messages so that every node is named, not only those that
//! decided a round.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::args::Connection;
use crate::duration::show;

/// How long one node may take to connect, and then to answer all of the survey's questions.
const NODE_DEADLINE: Duration = Duration::from_secs(2);

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
    let epoch_key = format!("{}\u{1f}epoch", conn.key_prefix);
    let urls = conn.nodes.iter().map(|n| n.trim());
    let names = locks.node_names();
    let nodes = futures::future::join_all(urls.zip(names).map(|(url, name)| {
        let (key, epoch_key) = (key.clone(), epoch_key.clone());
        let (url, name) = (url.to_string(), name.to_string());
        async move { inspect(&url, name, &key, &epoch_key).await }
    }))
    .await;
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

/// Reads one node, bounded by [`NODE_DEADLINE`].
async fn inspect(url: &str, name: String, key: &str, epoch_key: &str) -> NodeReport {
    let mut report = NodeReport {
        node: name,
        error: None,
        rtt_ms: None,
        held: None,
        ttl_ms: None,
        identity: None,
        epoch: None,
        epoch_age_ms: None,
    };
    let read = tokio::time::timeout(NODE_DEADLINE, read(url, key, epoch_key)).await;
    match read {
        Ok(Ok(answers)) => {
            report.rtt_ms = Some(answers.rtt.as_micros() as f64 / 1000.0);
            report.held = Some(answers.pttl != -2);
            report.ttl_ms = u64::try_from(answers.pttl).ok();
            report.identity = answers
                .value
                .as_deref()
                .and_then(quorumlock::holder_identity)
                .map(str::to_string);
            let (epoch, age) = epoch_state(answers.epoch.as_deref(), answers.now_us);
            report.epoch = Some(epoch);
            report.epoch_age_ms = age;
        }
        Ok(Err(error)) => report.error = Some(redact(&error.to_string(), url, &report.node)),
        Err(_) => report.error = Some(format!("no answer within {}", show(NODE_DEADLINE))),
    }
    report
}

/// What `read` got from a node.
struct Answers {
    rtt: Duration,
    pttl: i64,
    /// The lock value (read only to extract the identity; never printed).
    value: Option<String>,
    epoch: Option<String>,
    now_us: u64,
}

async fn read(url: &str, key: &str, epoch_key: &str) -> redis::RedisResult<Answers> {
    let client = redis::Client::open(url)?;
    let mut conn: MultiplexedConnection = client.get_multiplexed_async_connection().await?;
    let start = Instant::now();
    let _: String = redis::cmd("PING").query_async(&mut conn).await?;
    let rtt = start.elapsed();
    let (pttl, value, epoch, (secs, micros)): (i64, Option<String>, Option<String>, (u64, u64)) =
        redis::pipe()
            .cmd("PTTL")
            .arg(key)
            .cmd("GET")
            .arg(key)
            .cmd("GET")
            .arg(epoch_key)
            .cmd("TIME")
            .query_async(&mut conn)
            .await?;
    Ok(Answers {
        rtt,
        pttl,
        value,
        epoch,
        now_us: secs.saturating_mul(1_000_000).saturating_add(micros),
    })
}

/// The epoch marker's state and, when stamped, its age on the node's clock.
fn epoch_state(marker: Option<&str>, now_us: u64) -> (&'static str, Option<u64>) {
    match marker.map(str::parse::<u64>) {
        None => ("missing", None),
        Some(Ok(0)) => ("provisioned", None),
        Some(Ok(born_us)) => ("stamped", Some(now_us.saturating_sub(born_us) / 1000)),
        Some(Err(_)) => ("unreadable", None),
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

/// A node's error text with the raw URL (which may carry a password) replaced by its name.
fn redact(text: &str, url: &str, name: &str) -> String {
    text.replace(url, name).to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_markers_are_classified() {
        assert_eq!(epoch_state(None, 5), ("missing", None));
        assert_eq!(epoch_state(Some("0"), 5), ("provisioned", None));
        assert_eq!(
            epoch_state(Some("1000000"), 3_500_000),
            ("stamped", Some(2500))
        );
        assert_eq!(epoch_state(Some("x"), 5), ("unreadable", None));
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

    #[test]
    fn errors_never_show_the_raw_url() {
        let url = "redis://u:secret@127.0.0.1:1";
        let text = redact(
            &format!("cannot reach {url}"),
            url,
            "redis://u:***@127.0.0.1:1",
        );
        assert!(!text.contains("secret"), "{text}");
    }

    fn node(error: bool, held: bool) -> NodeReport {
        NodeReport {
            node: "n".into(),
            error: error.then(|| "down".into()),
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
