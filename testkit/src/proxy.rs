//! The fault proxy: one TCP listener per (client, node) link, with a mode per direction (used
//! by the jepsen-lite harness and the benchmark; needs a running tokio runtime).
//!
//! `tc netem` is missing from this kernel, so delays, holds and partitions are made here, in
//! user space. Each client reaches node `n` only through its own link, which makes per-client
//! and asymmetric partitions deterministic.
//!
//! TCP never loses bytes inside a connection, and neither does this proxy except in
//! [`Mode::Blackhole`]: discarding bytes from a live stream would shift every later reply onto
//! the wrong request, a failure no real network produces. So every connection that lived
//! through a blackhole is closed when the blackhole ends, and the client reconnects.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What a link does with the bytes of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Accept and discard: a partition that keeps TCP up. Connections are closed when it ends.
    Blackhole,
    /// Reset open connections and every new one: a partition that fails fast.
    Reset,
    /// Forward each chunk this long after it arrived, in order.
    Delay(Duration),
    /// Buffer everything; forward it, in order, once the mode changes (hold-then-release).
    Hold,
    /// Close open connections and every new one (FIN).
    Close,
}

/// The modes of both directions of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// Client → node (requests).
    pub to_node: Mode,
    /// Node → client (replies).
    pub to_client: Mode,
}

impl Modes {
    /// Both directions pass.
    pub const PASS: Self = Self::both(Mode::Pass);

    /// The same mode both ways.
    pub const fn both(mode: Mode) -> Self {
        Self {
            to_node: mode,
            to_client: mode,
        }
    }

    fn any(self, mode: Mode) -> bool {
        self.to_node == mode || self.to_client == mode
    }
}

struct Link {
    addr: SocketAddr,
    modes: watch::Sender<Modes>,
    task: JoinHandle<()>,
    effects: Arc<Effects>,
}

/// What a link's faults did to its traffic: the proof that a proxy fault took effect.
#[derive(Debug, Default)]
struct Effects {
    /// Bytes discarded by a blackhole.
    discarded: AtomicU64,
    /// Bytes delayed or held.
    delayed: AtomicU64,
    /// Connections reset, closed or refused by a fault.
    cut: AtomicU64,
}

impl Effects {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// Every link of a run: `clients × nodes` listeners on loopback.
///
/// Links are addressed by (client, node) index; an index out of range is a bug in the test
/// that uses the proxy, and the accessors panic on it, like slice indexing.
pub struct Proxy {
    links: Vec<Vec<Link>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("clients", &self.links.len())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Starts a listener for each (client, node) pair, forwarding to `127.0.0.1:<node port>`.
    ///
    /// # Errors
    ///
    /// When a listener cannot be bound.
    pub async fn start(clients: usize, node_ports: &[u16]) -> std::io::Result<Self> {
        let mut links = Vec::with_capacity(clients);
        for _ in 0..clients {
            let mut row = Vec::with_capacity(node_ports.len());
            for &port in node_ports {
                row.push(Link::start(SocketAddr::from(([127, 0, 0, 1], port))).await?);
            }
            links.push(row);
        }
        Ok(Self { links })
    }

    /// The address client `c` uses for node `n`.
    pub fn addr(&self, c: usize, n: usize) -> SocketAddr {
        self.links[c][n].addr
    }

    /// The node URLs client `c` is given.
    pub fn urls(&self, c: usize) -> Vec<String> {
        self.links[c]
            .iter()
            .map(|l| format!("redis://{}", l.addr))
            .collect()
    }

    /// Sets both directions of link (c, n).
    pub fn set(&self, c: usize, n: usize, modes: Modes) {
        self.links[c][n].modes.send_replace(modes);
    }

    /// How much the faults of link (c, n) affected its traffic so far: bytes discarded or
    /// delayed plus connections cut. Growing while a fault is on proves it took effect.
    pub fn affected(&self, c: usize, n: usize) -> u64 {
        let effects = &self.links[c][n].effects;
        effects.discarded.load(Ordering::Relaxed)
            + effects.delayed.load(Ordering::Relaxed)
            + effects.cut.load(Ordering::Relaxed)
    }

    /// The current modes of link (c, n).
    pub fn modes(&self, c: usize, n: usize) -> Modes {
        *self.links[c][n].modes.borrow()
    }

    /// Every link back to [`Modes::PASS`]; held bytes are delivered, blackholed connections
    /// closed.
    pub fn heal_all(&self) {
        for row in &self.links {
            for link in row {
                link.modes.send_replace(Modes::PASS);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for link in self.links.iter().flatten() {
            link.task.abort();
        }
    }
}

impl Link {
    async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let port = super::listener_port().map_err(std::io::Error::other)?;
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (modes, _) = watch::channel(Modes::PASS);
        let sender = modes.clone();
        let effects = Arc::new(Effects::default());
        let counted = Arc::clone(&effects);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((down, _)) = accepted else { continue };
                        conns.spawn(connection(down, upstream, sender.subscribe(), Arc::clone(&counted)));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Self {
            addr,
            modes,
            task,
            effects,
        })
    }
}

/// A chunk waiting to be forwarded.
struct Chunk {
    deliver_at: Instant,
    bytes: Vec<u8>,
}

/// One direction's queue.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<Chunk>,
    last_deliver_at: Option<Instant>,
}

impl Queue {
    /// The bytes waiting.
    fn queued(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes.len()).sum()
    }

    fn push(&mut self, mode: Mode, bytes: Vec<u8>) {
        let delay = match mode {
            Mode::Delay(d) => d,
            _ => Duration::ZERO,
        };
        let mut deliver_at = Instant::now() + delay;
        // Never reorder: a shorter delay set later does not overtake earlier chunks.
        if let Some(last) = self.last_deliver_at {
            deliver_at = deliver_at.max(last);
        }
        self.last_deliver_at = Some(deliver_at);
        self.chunks.push_back(Chunk { deliver_at, bytes });
    }

    /// When the head may go out under `mode` (None: not while this mode lasts).
    fn next_due(&self, mode: Mode) -> Option<Instant> {
        match mode {
            Mode::Hold => None,
            _ => self.chunks.front().map(|c| c.deliver_at),
        }
    }

    async fn flush(
        &mut self,
        mode: Mode,
        out: &mut tokio::net::tcp::OwnedWriteHalf,
    ) -> std::io::Result<()> {
        if mode == Mode::Hold {
            return Ok(());
        }
        let now = Instant::now();
        while self.chunks.front().is_some_and(|c| c.deliver_at <= now) {
            if let Some(chunk) = self.chunks.pop_front() {
                out.write_all(&chunk.bytes).await?;
            }
        }
        Ok(())
    }
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Forwards one client connection until either side closes or the modes end it.
async fn connection(
    down: TcpStream,
    upstream: SocketAddr,
    mut modes: watch::Receiver<Modes>,
    effects: Arc<Effects>,
) {
    let mut current = *modes.borrow_and_update();
    if current.any(Mode::Reset) {
        Effects::add(&effects.cut, 1);
        let _ = down.set_zero_linger();
        return;
    }
    if current.any(Mode::Close) {
        Effects::add(&effects.cut, 1);
        return;
    }
    let Ok(up) = TcpStream::connect(upstream).await else {
        // The node is down: a refused connection looks like a reset to the client.
        let _ = down.set_zero_linger();
        return;
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (mut down_r, mut down_w) = down.into_split();
    let (mut up_r, mut up_w) = up.into_split();
    let mut to_node = Queue::default();
    let mut to_client = Queue::default();
    let mut lived_through_blackhole = current.any(Mode::Blackhole);
    let mut buf_d = vec![0u8; 16 * 1024];
    let mut buf_u = vec![0u8; 16 * 1024];
    loop {
        let due_n = to_node.next_due(current.to_node);
        let due_c = to_client.next_due(current.to_client);
        let due = match (due_n, due_c) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Biased, mode changes first: a fault set before bytes arrive takes effect before they
        // are forwarded (unbiased, a read ready in the same poll could win and pass them on).
        tokio::select! {
            biased;
            changed = modes.changed() => {
                if changed.is_err() {
                    break;
                }
                current = *modes.borrow_and_update();
                if current.any(Mode::Reset) {
                    Effects::add(&effects.cut, 1);
                    let _ = down_r.as_ref().set_zero_linger();
                    let _ = up_r.as_ref().set_zero_linger();
                    return;
                }
                if current.any(Mode::Close) {
                    Effects::add(&effects.cut, 1);
                    return;
                }
                if current.any(Mode::Blackhole) {
                    lived_through_blackhole = true;
                    // Queued bytes of a blackholed direction are discarded with the rest.
                    if current.to_node == Mode::Blackhole {
                        Effects::add(&effects.discarded, to_node.queued());
                        to_node.chunks.clear();
                    }
                    if current.to_client == Mode::Blackhole {
                        Effects::add(&effects.discarded, to_client.queued());
                        to_client.chunks.clear();
                    }
                } else if lived_through_blackhole {
                    // Bytes may have been discarded: this stream is out of step. Close it.
                    return;
                }
            }
            read = down_r.read(&mut buf_d) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if current.to_node == Mode::Blackhole {
                        lived_through_blackhole = true;
                        Effects::add(&effects.discarded, n);
                    } else {
                        if current.to_node != Mode::Pass {
                            Effects::add(&effects.delayed, n);
                        }
                        to_node.push(current.to_node, buf_d[..n].to_vec());
                    }
                }
            },
            read = up_r.read(&mut buf_u) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if current.to_client == Mode::Blackhole {
                        lived_through_blackhole = true;
                        Effects::add(&effects.discarded, n);
                    } else {
                        if current.to_client != Mode::Pass {
                            Effects::add(&effects.delayed, n);
                        }
                        to_client.push(current.to_client, buf_u[..n].to_vec());
                    }
                }
            },
            () = sleep_until_opt(due) => {}
        }
        if to_node.flush(current.to_node, &mut up_w).await.is_err()
            || to_client
                .flush(current.to_client, &mut down_w)
                .await
                .is_err()
        {
            break;
        }
    }
    // One side closed: forward what may go out now, then close both.
    let _ = to_node.flush(current.to_node, &mut up_w).await;
    let _ = to_client.flush(current.to_client, &mut down_w).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server standing in for a node.
    async fn echo() -> u16 {
        let port = crate::listener_port().expect("a port");
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    async fn setup() -> (Proxy, TcpStream) {
        let port = echo().await;
        let proxy = Proxy::start(1, &[port]).await.expect("proxy");
        let s = TcpStream::connect(proxy.addr(0, 0)).await.expect("connect");
        (proxy, s)
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        let deadline = tokio::time::Instant::now() + within;
        while got.len() < msg.len() {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
        }
        Some(got)
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() {
        let (_proxy, mut s) = setup().await;
        let got = roundtrip(&mut s, b"ping", Duration::from_secs(2)).await;
        assert_eq!(got.as_deref(), Some(&b"ping"[..]));
    }

    #[tokio::test]
    async fn delay_holds_each_chunk_for_the_delay() {
        let (proxy, mut s) = setup().await;
        proxy.set(
            0,
            0,
            Modes {
                to_node: Mode::Delay(Duration::from_millis(150)),
                to_client: Mode::Pass,
            },
        );
        let t = std::time::Instant::now();
        let got = roundtrip(&mut s, b"slow", Duration::from_secs(2)).await;
        assert_eq!(got.as_deref(), Some(&b"slow"[..]));
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }

    /// Held replies arrive only after the release, all of them, in order.
    #[tokio::test]
    async fn hold_then_release_delivers_everything_in_order() {
        let (proxy, mut s) = setup().await;
        proxy.set(
            0,
            0,
            Modes {
                to_node: Mode::Pass,
                to_client: Mode::Hold,
            },
        );
        assert_eq!(
            roundtrip(&mut s, b"a", Duration::from_millis(200)).await,
            None
        );
        s.write_all(b"bc").await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.set(0, 0, Modes::PASS);
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < 3 {
            let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
                .await
                .expect("in time")
                .expect("read");
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"abc");
    }

    /// A blackhole discards bytes and closes the connection when it ends; new connections work.
    #[tokio::test]
    async fn blackhole_discards_then_closes_the_connection() {
        let (proxy, mut s) = setup().await;
        proxy.set(0, 0, Modes::both(Mode::Blackhole));
        assert_eq!(
            roundtrip(&mut s, b"lost", Duration::from_millis(200)).await,
            None
        );
        proxy.set(0, 0, Modes::PASS);
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .expect("closed in time");
        assert!(
            matches!(n, Ok(0) | Err(_)),
            "the old stream must not carry on: {n:?}"
        );
        let mut fresh = TcpStream::connect(proxy.addr(0, 0)).await.expect("connect");
        let got = roundtrip(&mut fresh, b"new", Duration::from_secs(2)).await;
        assert_eq!(got.as_deref(), Some(&b"new"[..]));
    }

    #[tokio::test]
    async fn reset_kills_open_and_new_connections() {
        let (proxy, mut s) = setup().await;
        proxy.set(0, 0, Modes::both(Mode::Reset));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            roundtrip(&mut s, b"x", Duration::from_millis(500)).await,
            None
        );
        let mut fresh = TcpStream::connect(proxy.addr(0, 0)).await.expect("accepts");
        assert_eq!(
            roundtrip(&mut fresh, b"y", Duration::from_millis(500)).await,
            None
        );
        proxy.heal_all();
        let mut healed = TcpStream::connect(proxy.addr(0, 0)).await.expect("connect");
        assert!(roundtrip(&mut healed, b"z", Duration::from_secs(2))
            .await
            .is_some());
    }

    #[tokio::test]
    async fn close_ends_connections_with_eof() {
        let (proxy, mut s) = setup().await;
        proxy.set(0, 0, Modes::both(Mode::Close));
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .expect("in time");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }

    /// Links are per client: partitioning client 0 from node 0 leaves client 1 alone.
    #[tokio::test]
    async fn links_are_per_client() {
        let port = echo().await;
        let proxy = Proxy::start(2, &[port]).await.expect("proxy");
        proxy.set(0, 0, Modes::both(Mode::Reset));
        let mut one = TcpStream::connect(proxy.addr(1, 0)).await.expect("connect");
        assert!(roundtrip(&mut one, b"ok", Duration::from_secs(2))
            .await
            .is_some());
        assert_eq!(proxy.urls(1).len(), 1);
    }
}
