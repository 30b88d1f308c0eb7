//! `quorumlock status`: what each node holds for a resource, read directly from the nodes.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::args::{Connection, StatusArgs};
use crate::duration::show;
use crate::exit;

/// How long one node may take to connect, and then to answer all of status's questions.
const NODE_DEADLINE: Duration = Duration::from_secs(2);

/// The whole report, as printed by `--json`.
#[derive(Debug, Serialize)]
struct Report {
    resource: String,
    key: String,
    /// `held` (the key exists on a quorum), `free` (on no node) or `partial`.
    state: &'static str,
    held_on: usize,
    answered: usize,
    quorum: usize,
    /// The holder's identity when the lock was taken with one (`quorumlock elect`,
    /// `Redlock::campaign`: it is stored in the lock value), as found on the most nodes;
    /// `null` for a plain lock, whose value says nothing about its owner.
    owner: Option<String>,
    nodes: Vec<NodeReport>,
}

/// One node's answers.
#[derive(Debug, Serialize)]
struct NodeReport {
    /// The URL, password redacted.
    node: String,
    /// Why the node could not be read; all other fields are `null` then.
    error: Option<String>,
    /// Round-trip time of one `PING`, in milliseconds.
    rtt_ms: Option<f64>,
    /// Whether the lock key exists.
    held: Option<bool>,
    /// The key's remaining time to live, in milliseconds (`null` when absent or without expiry).
    ttl_ms: Option<u64>,
    /// The holder's identity stored in the lock value, if any (never the value itself: it is
    /// the holder's secret).
    identity: Option<String>,
    /// `missing` (no marker: never used, or restarted without its data), `provisioned`, or
    /// `stamped` (created at a first acquisition).
    epoch: Option<&'static str>,
    /// Age of the epoch marker by the node's own clock, in milliseconds (`null` unless stamped).
    epoch_age_ms: Option<u64>,
}

/// Runs `quorumlock status`; returns the exit code.
pub(crate) async fn run(locks: &quorumlock::Redlock, conn: &Connection, args: StatusArgs) -> u8 {
    let key = format!("{}{}", conn.key_prefix, args.resource);
    let epoch_key = format!("{}\u{1f}epoch", conn.key_prefix);
    let urls = conn.nodes.iter().map(|n| n.trim());
    let names = locks.node_names();
    let nodes = futures::future::join_all(urls.zip(names).map(|(url, name)| {
        let (key, epoch_key) = (key.clone(), epoch_key.clone());
        let (url, name) = (url.to_string(), name.to_string());
        async move { inspect(&url, name, &key, &epoch_key).await }
    }))
    .await;

    let answered = nodes.iter().filter(|n| n.error.is_none()).count();
    let held_on = nodes.iter().filter(|n| n.held == Some(true)).count();
    let quorum = locks.quorum();
    let owner = most_common(nodes.iter().filter_map(|n| n.identity.as_deref()));
    let state = if held_on >= quorum {
        "held"
    } else if held_on == 0 {
        "free"
    } else {
        "partial"
    };
    let report = Report {
        resource: args.resource,
        key: key.replace('\u{1f}', "\\x1f"),
        state,
        held_on,
        answered,
        quorum,
        owner,
        nodes,
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("quorumlock: cannot render JSON: {error}");
                return exit::UNAVAILABLE;
            }
        }
    } else {
        print_table(&report);
    }
    if answered >= quorum {
        0
    } else {
        eprintln!(
            "quorumlock: only {answered} of {} node(s) answered, a quorum needs {quorum}",
            report.nodes.len()
        );
        exit::UNAVAILABLE
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

/// The readable table.
fn print_table(report: &Report) {
    let rows: Vec<[String; 5]> = report
        .nodes
        .iter()
        .map(|n| match &n.error {
            Some(error) => [
                n.node.clone(),
                "unreachable".into(),
                "-".into(),
                "-".into(),
                error.clone(),
            ],
            None => [
                n.node.clone(),
                match n.held {
                    Some(true) => "held".into(),
                    _ => "free".into(),
                },
                match (n.held, n.ttl_ms) {
                    (Some(true), Some(ms)) => show(Duration::from_millis(ms)),
                    (Some(true), None) => "no expiry".into(),
                    _ => "-".into(),
                },
                match (n.epoch, n.epoch_age_ms) {
                    (Some("stamped"), Some(ms)) => {
                        format!("{} old", show(Duration::from_millis(ms)))
                    }
                    (Some(state), _) => state.to_string(),
                    (None, _) => "-".into(),
                },
                n.rtt_ms.map_or("-".into(), |ms| format!("{ms:.2} ms")),
            ],
        })
        .collect();
    let header = ["NODE", "KEY", "TTL", "EPOCH", "RTT"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    let owner = match &report.owner {
        Some(identity) => format!("held by {identity:?}"),
        None => "owner unknown (the lock value carries no identity)".to_string(),
    };
    println!(
        "resource {:?} (key {}): {} on {} of {} node(s), quorum {}; {owner}",
        report.resource,
        report.key,
        report.state,
        report.held_on,
        report.nodes.len(),
        report.quorum
    );
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
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
}
