//! `quorumlock status` and `quorumlock provision` against real masters.

use crate::support;

use std::time::Duration;

use support::{cluster, quorumlock, REFUSED, UNAVAILABLE, USAGE};

fn status_json(cluster: &quorumlock_testkit::RedisCluster, resource: &str) -> serde_json::Value {
    let out = quorumlock(cluster)
        .args(["status", "--json", "-r", resource])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A held lock shows on every node with a TTL, a free one on none; the owner is never claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_held_and_free() {
    let cluster = cluster(3);
    let locks = quorumlock::Redlock::builder()
        .nodes(cluster.urls())
        .build()
        .expect("manager");
    let guard = locks
        .lock("report", Duration::from_secs(30))
        .await
        .expect("lock");
    let held = tokio::task::block_in_place(|| status_json(&cluster, "report"));
    assert_eq!(held["state"], "held", "{held}");
    // The round is decided at the quorum: a third SET may never have been sent.
    assert!(held["held_on"].as_u64().is_some_and(|n| n >= 2), "{held}");
    assert!(held["owner"].is_null());
    for node in held["nodes"].as_array().expect("nodes") {
        if node["held"] != true {
            continue;
        }
        let ttl = node["ttl_ms"].as_u64().expect("ttl");
        assert!(ttl > 20_000 && ttl <= 30_000, "{node}");
        assert!(node["rtt_ms"].as_f64().is_some(), "{node}");
    }
    guard.release().await.expect("release");
    let free = tokio::task::block_in_place(|| status_json(&cluster, "report"));
    assert_eq!(free["state"], "free", "{free}");

    let table = tokio::task::block_in_place(|| {
        quorumlock(&cluster)
            .args(["status", "-r", "report"])
            .output()
            .expect("run")
    });
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("owner unknown") && text.contains("RTT"),
        "{text}"
    );
}

/// `provision` refuses nodes started less than one max TTL ago, naming each and writing
/// nothing, unless forced; it then marks every node, status shows the marker, and a dead
/// majority makes both report "unavailable" (69) with the node named.
#[test]
fn provision_and_epoch_markers() {
    let mut cluster = cluster(3);
    let before = status_json(&cluster, "x");
    assert!(before["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .all(|n| n["epoch"] == "missing"));

    let provision = |cluster: &quorumlock_testkit::RedisCluster, extra: &[&str]| {
        quorumlock(cluster)
            .args(["--restart-protection", "1h", "provision"])
            .args(extra)
            .output()
            .expect("run")
    };
    let without_max_ttl = quorumlock(&cluster).arg("provision").output().expect("run");
    assert_eq!(without_max_ttl.status.code(), Some(USAGE));
    // The masters just started: each may have restarted and forgotten live locks.
    let refused = provision(&cluster, &[]);
    assert_eq!(refused.status.code(), Some(REFUSED));
    let text = String::from_utf8_lossy(&refused.stderr);
    for master in &cluster {
        assert!(text.contains(&master.port().to_string()), "{text}");
    }
    assert!(text.contains("--force"), "{text}");
    assert!(
        status_json(&cluster, "x")["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["epoch"] == "missing"),
        "a refused provision writes nothing"
    );

    let forced = provision(&cluster, &["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    let after = status_json(&cluster, "x");
    assert!(
        after["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["epoch"] == "provisioned"),
        "{after}"
    );

    cluster[0].kill().expect("kill");
    cluster[1].kill().expect("kill");
    let out = quorumlock(&cluster)
        .args(["status", "-r", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(UNAVAILABLE));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("unreachable"), "{text}");
    assert_eq!(provision(&cluster, &[]).status.code(), Some(UNAVAILABLE));
    assert_eq!(
        provision(&cluster, &["--force"]).status.code(),
        Some(UNAVAILABLE)
    );
}

/// A stamped epoch marker (restart protection, first acquisition) shows its age on the node's
/// clock.
#[test]
fn stamped_epoch_marker_has_an_age() {
    let cluster = cluster(1);
    let status = quorumlock(&cluster)
        .args([
            "--restart-protection",
            "10s",
            "exec",
            "-r",
            "x",
            "--ttl",
            "500ms",
        ])
        .args(["--no-wait", "--", "true"])
        .status()
        .expect("run");
    // The fresh node sits out its quarantine, so this acquisition fails (no quorum counts:
    // unavailable, not held elsewhere); it stamped the marker.
    assert_eq!(status.code(), Some(UNAVAILABLE));
    std::thread::sleep(Duration::from_millis(200));
    let report = status_json(&cluster, "x");
    let node = &report["nodes"][0];
    assert_eq!(node["epoch"], "stamped", "{report}");
    assert!(
        node["epoch_age_ms"].as_u64().is_some_and(|a| a >= 150),
        "{report}"
    );
}

/// Every master down: the state is unknown (not "free on 0 of 3"), exit 69.
#[test]
fn status_with_every_node_down_is_unknown() {
    let dead = support::dead_cluster(3);
    let (code, out, err) = support::run(quorumlock(&dead).args(["status", "-r", "x"]));
    assert_eq!(code, Some(UNAVAILABLE), "{err}");
    assert!(out.contains("unknown") && !out.contains("free"), "{out}");
    let (_, json, _) = support::run(quorumlock(&dead).args(["status", "--json", "-r", "x"]));
    let report: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(report["state"], "unknown", "{report}");
}

/// `status --slot` shows a `--once` slot: free, then abandoned by a failed run (with its
/// runner and attempts), then completed.
#[test]
fn status_shows_a_slot() {
    let cluster = cluster(3);
    let slot = |cluster: &quorumlock_testkit::RedisCluster| {
        support::run(quorumlock(cluster).args(["status", "-r", "job", "--slot", "s1"]))
    };
    let (code, out, err) = slot(&cluster);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("free"), "{out}");
    let once = |script: &str| {
        support::run(
            quorumlock(&cluster)
                .args(["exec", "-r", "job", "--once", "s1"])
                .args(["--", "sh", "-c", script]),
        )
        .0
    };
    assert_eq!(once("exit 1"), Some(1));
    let (_, out, _) = slot(&cluster);
    assert!(
        out.contains("abandoned") && out.contains("attempt 1"),
        "{out}"
    );
    assert_eq!(once("true"), Some(80));
    let (code, json, _) =
        support::run(quorumlock(&cluster).args(["status", "--json", "-r", "job", "--slot", "s1"]));
    assert_eq!(code, Some(0));
    let report: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(report["state"], "abandoned", "{report}");
}
