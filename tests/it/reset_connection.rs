//! Late writes behind a reset connection: when a connection breaks on the client's side while
//! the master's side stays open with a `SET` still to come (a middlebox reset only the client,
//! bytes still on the wire), the replacement connection closes the old one on the master first,
//! so the late `SET` can no longer run after the cleanup sent on the new connection.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock_testkit::RedisMaster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use support::{builder, cluster, key, script_calls, wait_until, PATIENCE};

/// The first connection through the proxy, under the test's control.
#[derive(Default)]
struct First {
    /// Whether client → master bytes are held back instead of forwarded.
    holding: bool,
    /// What was held back.
    held: Vec<u8>,
    /// The master's side, kept open after the client's side is reset.
    to_master: Option<OwnedWriteHalf>,
    /// The two pumps, which own the client's side.
    pumps: Vec<JoinHandle<()>>,
}

/// A TCP proxy to one master. Its first connection can hold requests back, have its client
/// side reset while its master side stays open, then deliver what it held. Later connections
/// pass through.
struct Proxy {
    addr: SocketAddr,
    first: Arc<tokio::sync::Mutex<First>>,
    held_bytes: Arc<Mutex<usize>>,
}

impl Proxy {
    async fn start(upstream: u16) -> Self {
        let listener = support::local_listener().await;
        let addr = listener.local_addr().expect("local addr");
        let first = Arc::new(tokio::sync::Mutex::new(First::default()));
        let held_bytes = Arc::new(Mutex::new(0));
        let (control, counter) = (Arc::clone(&first), Arc::clone(&held_bytes));
        tokio::spawn(async move {
            let mut accepted = 0;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(master) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                accepted += 1;
                if accepted > 1 {
                    tokio::spawn(async move {
                        let (mut client, mut master) = (client, master);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut master).await;
                    });
                    continue;
                }
                // Closing the client's side then resets it (RST), as a middlebox would.
                client.set_zero_linger().expect("linger");
                let (mut client_read, mut client_write) = client.into_split();
                let (mut master_read, master_write) = master.into_split();
                let mut state = control.lock().await;
                state.to_master = Some(master_write);
                let replies = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut master_read, &mut client_write).await;
                });
                let (control, counter) = (Arc::clone(&control), Arc::clone(&counter));
                let requests = tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    loop {
                        let n = match client_read.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let mut state = control.lock().await;
                        if state.holding {
                            state.held.extend_from_slice(&buf[..n]);
                            *counter.lock().expect("counter") = state.held.len();
                        } else if let Some(to_master) = state.to_master.as_mut() {
                            if to_master.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                });
                state.pumps = vec![replies, requests];
            }
        });
        Self {
            addr,
            first,
            held_bytes,
        }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// From now on, the first connection's requests are held back.
    async fn hold(&self) {
        self.first.lock().await.holding = true;
    }

    fn held(&self) -> usize {
        *self.held_bytes.lock().expect("counter")
    }

    /// Resets the first connection's client side; its master side stays open.
    async fn reset_client_side(&self) {
        let mut state = self.first.lock().await;
        for pump in state.pumps.drain(..) {
            pump.abort();
            let _ = pump.await;
        }
    }

    /// Delivers what was held back on the first connection's master side, if the master still
    /// has it open, then closes it (the FIN follows the bytes, so a master that has the
    /// connection open reads them first). Returns that connection's address as the master sees
    /// it.
    async fn deliver_held(&self) -> SocketAddr {
        let mut state = self.first.lock().await;
        let held = std::mem::take(&mut state.held);
        let mut to_master = state
            .to_master
            .take()
            .expect("the first connection's master side");
        let addr = to_master.local_addr().expect("local addr");
        let _ = to_master.write_all(&held).await;
        let _ = to_master.flush().await;
        addr
    }
}

/// Whether `master` lists a client connected from `addr` (`CLIENT LIST`).
fn connected_from(master: &RedisMaster, addr: SocketAddr) -> bool {
    let field = format!("addr={addr}");
    master
        .command(&["CLIENT", "LIST"])
        .expect("CLIENT LIST")
        .lines()
        .any(|line| line.split(' ').any(|f| f == field))
}

/// Regression: a `SET` still on its way when the client's side of its connection was reset ran
/// on the master after the release sent on the new connection, and the key stayed until its
/// TTL. The new connection now closes the old one on the master before releasing.
// One thread: the round polls all three requests (queueing their `SET`s) before any reply can
// be read, so the third `SET` always goes out, even though the round does not wait for it.
#[tokio::test]
async fn a_late_set_behind_a_reset_connection_cannot_outlive_its_release() {
    let cluster = cluster(3);
    let proxy = Proxy::start(cluster[2].port()).await;
    let urls = [cluster[0].url(), cluster[1].url(), proxy.url()];
    let locks = builder(&urls)
        .connections_per_node(1)
        .build()
        .expect("build");
    locks.connect().await.expect("connect");

    // The third master's SET stays on the wire; the other two make the quorum.
    proxy.hold().await;
    let ttl = Duration::from_secs(60);
    let guard = locks.lock("late", ttl).await.expect("lock on a quorum");
    wait_until("the third SET reached the proxy", PATIENCE, || {
        proxy.held() > 0
    })
    .await;

    // The client's side of that connection is reset; the release goes out on a new one.
    proxy.reset_client_side().await;
    let released = guard.release().await;
    assert!(released.is_ok(), "{released:?}");

    // The third master's delete goes out in the background, once a new connection is up.
    wait_until("the release ran on the third master", PATIENCE, || {
        script_calls(&cluster[2]) > 0
    })
    .await;
    // Now the late SET arrives on the old connection, which the master may still have open.
    // Once the master no longer lists that connection, it has run whatever came on it.
    let old = proxy.deliver_held().await;
    wait_until("the master closed the old connection", PATIENCE, || {
        !connected_from(&cluster[2], old)
    })
    .await;
    let left = cluster[2]
        .command(&["EXISTS", &key("late")])
        .expect("EXISTS");
    assert_eq!(
        left, "0",
        "the late SET ran after the release and left the key for its ttl"
    );
}
