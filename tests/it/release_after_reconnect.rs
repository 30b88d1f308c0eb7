//! A release whose compare-and-delete ran but whose reply was lost to a broken connection is
//! retried on a fresh connection, which finds nothing to delete: that "0" is our own delete as
//! likely as a lost lock, so `release()` reports it as uncertain, never as `NotHeld { Lost }`.
//!
//! How the reply is lost, deterministically: the master is paused (`SIGSTOP`) while the
//! release is written to it, and then a `CLIENT KILL` on a connection it accepted beforehand.
//! Once both sit in the master's socket buffers, in that order, it is resumed: one event-loop
//! pass reads them in the order they arrived, the delete runs, its reply waits to be written
//! after the pass, and the kill closes the connection first. (Linux: the socket buffers are
//! read from `/proc/net/tcp`.)

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind};
use quorumlock_testkit::RedisMaster;
use support::{builder, calls, cluster, get, grant, key, our_keys, wait_until, warm_up, PATIENCE};

/// One command in RESP.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n{arg}\r\n", arg.len()).into_bytes());
    }
    out
}

/// A connection to `master` that the server has accepted (it answered a `PING`), so that a
/// command written on it later is read in the same event-loop pass as the others.
fn accepted(master: &RedisMaster) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", master.port())).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut conn = BufReader::new(stream);
    conn.get_mut().write_all(&encode(&["PING"])).expect("PING");
    let mut line = String::new();
    conn.read_line(&mut line).expect("PONG");
    assert_eq!(line, "+PONG\r\n");
    conn
}

/// How many established connections to `port` on 127.0.0.1 have bytes that the server has
/// not read yet (`/proc/net/tcp`, Linux).
fn unread_connections(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, remote address, state (01: established), tx_queue:rx_queue.
            fields.get(1) == Some(&local.as_str())
                && fields.get(3) == Some(&"01")
                && fields
                    .get(4)
                    .and_then(|queues| queues.split(':').nth(1))
                    .is_some_and(|rx| u64::from_str_radix(rx, 16).is_ok_and(|rx| rx > 0))
        })
        .count()
}

/// Regression: on 2 of 3 masters the compare-and-delete runs and its reply
/// is lost with its connection; the retry answers 0. `release()` used to count those as
/// "not ours" and return `NotHeld { Lost }` for a lock it did release; it is uncertain (the
/// masters failed), and the keys are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_whose_reply_was_lost_is_not_reported_lost() {
    let mut cluster = cluster(3);
    // Far longer than the pause, so that the retry runs within the same request.
    let locks = builder(&cluster.urls())
        .node_timeout(Duration::from_secs(10))
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    // A grant decided by two masters can leave the third's SET unsent (dropped before it was
    // written); that master would rightly answer "not ours". Take a grant all three hold.
    let mut attempts = 0;
    let guard = loop {
        let guard = grant(&locks, "r", Duration::from_secs(60)).await;
        // Every straggler SET of the grant that was sent has run.
        warm_up(&locks, &cluster).await;
        if cluster.iter().all(|m| get(m, &key("r")).is_some()) {
            break guard;
        }
        guard.release().await.expect("release a partial grant");
        attempts += 1;
        assert!(attempts < 20, "no grant reached all three masters");
    };
    // The first two masters lose the release's reply; the third answers it.
    let victims = 0..2;
    let ports: Vec<u16> = victims.clone().map(|i| cluster[i].port()).collect();
    let mut killers: Vec<_> = victims.clone().map(|i| accepted(&cluster[i])).collect();
    // Read after the killers' PING, and that matters: the master's epoll is level-triggered,
    // so a connection that just had input stays on the kernel's ready list until the master's
    // next wait, where it would come before the release. Answering this query takes that wait.
    let before: Vec<u64> = victims
        .clone()
        .map(|i| calls(&cluster[i], "evalsha"))
        .collect();
    for i in victims.clone() {
        cluster[i].pause().expect("pause");
    }
    let release = tokio::spawn(guard.release());
    wait_until(
        "the release waits in each paused master's buffer",
        PATIENCE,
        || ports.iter().all(|&port| unread_connections(port) == 1),
    )
    .await;
    let kill = encode(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    for conn in &mut killers {
        conn.get_mut().write_all(&kill).expect("CLIENT KILL");
    }
    wait_until("the kill waits behind it", PATIENCE, || {
        ports.iter().all(|&port| unread_connections(port) == 2)
    })
    .await;
    for i in victims.clone() {
        cluster[i].resume().expect("resume");
    }
    let result = release.await.expect("release task");
    for conn in &mut killers {
        let mut line = String::new();
        conn.read_line(&mut line).expect("CLIENT KILL reply");
        assert!(line.starts_with(':'), "CLIENT KILL answered {line:?}");
    }

    // The scene was as intended: on each victim the delete ran twice (the lost one and the
    // retry), and no key of ours is left anywhere.
    for (i, before) in victims.zip(before) {
        let master = &cluster[i];
        let after = calls(master, "evalsha");
        assert!(
            after >= before + 2,
            "port {}: the release and its retry ran: {before} then {after} calls; \
             release gave {result:?}",
            master.port()
        );
    }
    for master in cluster.iter() {
        assert!(
            !our_keys(master).contains(&key("r")),
            "port {}: {:?}",
            master.port(),
            our_keys(master)
        );
    }
    let error = result.expect_err("2 of 3 masters could not confirm the release");
    match &error {
        LockError::QuorumUnreachable {
            granted: 1,
            failures,
            ..
        } => {
            assert_eq!(failures.len(), 2, "{error}");
            for failure in failures {
                assert!(
                    matches!(failure.kind(), NodeErrorKind::ConnectionLost(_)),
                    "{error}"
                );
            }
        }
        other => panic!("expected an uncertain release (quorum unreachable), got {other}"),
    }
}
