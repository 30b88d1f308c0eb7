//! A "master" that does not speak Redis, or answers lock commands with nonsense, is a failing
//! node with a typed error that names it: never a grant, never a panic.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind};
use support::{builder, cluster, total_keys, wait_until, PATIENCE};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const TTL: Duration = Duration::from_secs(10);

/// Listens on a free port; every connection gets nonsense bytes and is then held open, its
/// input discarded.
async fn spawn_garbage_server() -> SocketAddr {
    let listener = support::local_listener().await;
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut garbage = b"HELLO THIS IS NOT REDIS\r\n".to_vec();
                for _ in 0..8 {
                    garbage.extend_from_slice(&rand::random::<u128>().to_le_bytes());
                }
                garbage.extend_from_slice(b"\r\n\x00\xff*-1\r\n$99999999999\r\n");
                if socket.write_all(&garbage).await.is_err() {
                    return;
                }
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// Listens on a free port and answers every RESP command with the integer 7: well-formed
/// replies that no lock command ever gets.
async fn spawn_wrong_reply_server() -> SocketAddr {
    let listener = support::local_listener().await;
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(answer_seven(socket));
        }
    });
    addr
}

async fn answer_seven(socket: TcpStream) {
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        if !matches!(read.read_line(&mut line).await, Ok(n) if n > 0) {
            return;
        }
        let Some(args) = line.trim_end().strip_prefix('*') else {
            return;
        };
        let Ok(args) = args.parse::<usize>() else {
            return;
        };
        for _ in 0..args {
            line.clear();
            if read.read_line(&mut line).await.is_err() {
                return;
            }
            let Some(Ok(len)) = line.trim_end().strip_prefix('$').map(str::parse::<usize>) else {
                return;
            };
            let mut arg = vec![0u8; len + 2];
            if read.read_exact(&mut arg).await.is_err() {
                return;
            }
        }
        if write.write_all(b":7\r\n").await.is_err() {
            return;
        }
    }
}

/// A node that spews garbage is a named failure: 2 real masters still grant, alone it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_node_is_a_named_failure() {
    let garbage = spawn_garbage_server().await;
    let garbage_url = format!("redis://{garbage}");
    assert_failing_node_is_typed(&garbage_url).await;
}

/// A node that answers every command with a well-formed but wrong reply is a failure too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_wrong_replies_is_a_named_failure() {
    let wrong = spawn_wrong_reply_server().await;
    let wrong_url = format!("redis://{wrong}");
    let error = assert_failing_node_is_typed(&wrong_url).await;
    assert!(
        error.node_errors().iter().all(|e| matches!(
            e.kind(),
            NodeErrorKind::UnexpectedReply(_) | NodeErrorKind::Connect(_)
        )),
        "{error}"
    );
}

/// Regression: a wrong SHA in reply to `SCRIPT LOAD` panicked the connect task (debug builds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_load_with_a_wrong_sha_is_an_error_not_a_panic() {
    let wrong = spawn_wrong_reply_server().await;
    // Wait for the connection attempt's own outcome rather than give up on it first.
    let locks = builder(&[format!("redis://{wrong}")])
        .node_timeout(Duration::from_secs(3))
        .build()
        .expect("build manager");
    let error = locks
        .try_lock("garbage", TTL)
        .await
        .expect_err("not a Redis master");
    assert_eq!(error.node_errors().len(), 1, "{error}");
    assert!(!error.to_string().contains("panicked"), "{error}");
}

/// Checks both halves of the behaviour for the failing node at `bad_url` and returns the
/// error of the manager over it alone.
async fn assert_failing_node_is_typed(bad_url: &str) -> LockError {
    let cluster = cluster(2);
    let mut urls = vec![bad_url.to_string()];
    urls.extend(cluster.urls());
    let locks = builder(&urls).build().expect("build manager");
    for round in 0..3 {
        let guard = locks
            .try_lock("garbage", TTL)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 2 of 3 nodes are real masters: {e}"));
        assert!(guard.is_valid());
        guard.release().await.expect("release");
    }
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;

    let alone = builder(&[bad_url]).build().expect("build manager");
    for attempt in 0..2 {
        let error = alone
            .try_lock("garbage", TTL)
            .await
            .expect_err("the only node is not a Redis master");
        match &error {
            LockError::QuorumUnreachable {
                granted, failures, ..
            } => {
                assert_eq!(*granted, 0, "{error}");
                assert_eq!(failures.len(), 1, "{error}");
                assert_eq!(failures[0].node(), bad_url, "{error}");
                assert!(error.to_string().contains(bad_url), "{error}");
            }
            other => panic!("attempt {attempt}: expected QuorumUnreachable, got {other:?}"),
        }
        if attempt == 1 {
            return error;
        }
    }
    unreachable!("the loop returns on its last attempt")
}
