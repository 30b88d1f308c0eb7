//! Free TCP ports on the loopback interface: from the range in `QUORUMLOCK_TEST_PORTS`
//! (`FIRST-LAST`, say `21000-21999`) when it is set, so that tests keep out of the ports other
//! servers on a shared machine use; else whatever the kernel offers.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

use super::TestingError;

/// Ports this process has already handed out. Tests run in parallel threads of one process, and
/// the kernel may offer a port again as soon as its probe listener is closed: remembering what
/// was issued removes that race inside the process. Races with other processes remain, and
/// [`RedisMaster`](super::RedisMaster) handles them by retrying on another port.
static ISSUED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// How many kernel offers to look at before giving up on finding a port not yet issued.
const MAX_PROBES: usize = 64;

/// The environment variable naming the range test masters take their ports from.
pub const PORTS_VAR: &str = "QUORUMLOCK_TEST_PORTS";

/// A port on 127.0.0.1 that nothing listened on a moment ago and that this process has not handed
/// out before, from `QUORUMLOCK_TEST_PORTS` when it is set: for a server started with its port
/// on the command line. A listener bound at once takes [`listener_port`] instead.
///
/// # Errors
///
/// A malformed range, or one with no free port left; without a range, when the kernel offers
/// only ports already handed out.
pub fn free_port() -> Result<u16, TestingError> {
    let mut issued = ISSUED.lock().unwrap_or_else(PoisonError::into_inner);
    let issued = issued.get_or_insert_with(HashSet::new);
    if let Some(range) = std::env::var_os(PORTS_VAR) {
        let range = range.to_string_lossy();
        let (first, last) = parse_range(&range)?;
        return free_in_range(first, last, issued);
    }
    for _ in 0..MAX_PROBES {
        let port = probe()?;
        if issued.insert(port) {
            return Ok(port);
        }
    }
    Err(TestingError::io(
        "finding a free port on 127.0.0.1",
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("the kernel offered only ports already in use after {MAX_PROBES} probes"),
        ),
    ))
}

/// The port a test listener (a proxy, a store) should bind on 127.0.0.1: one from
/// `QUORUMLOCK_TEST_PORTS` when it is set, else 0 (the kernel picks).
///
/// # Errors
///
/// A malformed range, or one with no free port left.
pub fn listener_port() -> Result<u16, TestingError> {
    match std::env::var_os(PORTS_VAR) {
        Some(_) => free_port(),
        None => Ok(0),
    }
}

/// Reads `FIRST-LAST` (inclusive, 1 to 65535, FIRST not above LAST).
fn parse_range(text: &str) -> Result<(u16, u16), TestingError> {
    let bad = || {
        TestingError::io(
            "reading QUORUMLOCK_TEST_PORTS",
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{text:?}: expected FIRST-LAST, two ports from 1 to 65535, say 21000-21999"
                ),
            ),
        )
    };
    let (first, last) = text.trim().split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok((first, last))
}

/// The first port of `first..=last` this process has not issued and nothing listens on, looked
/// for from an offset that depends on the process, so that test processes started together do
/// not all try the same ports first.
fn free_in_range(first: u16, last: u16, issued: &mut HashSet<u16>) -> Result<u16, TestingError> {
    let size = u32::from(last - first) + 1;
    let offset = std::process::id() % size;
    for step in 0..size {
        let port = first + u16::try_from((offset + step) % size).unwrap_or(0);
        if issued.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            issued.insert(port);
            return Ok(port);
        }
    }
    Err(TestingError::io(
        "finding a free port in QUORUMLOCK_TEST_PORTS",
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("every port of {first}-{last} is in use or already handed out"),
        ),
    ))
}

/// Asks the kernel for an unused port by binding port 0; the listener is closed on return.
fn probe() -> Result<u16, TestingError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| TestingError::io("binding a probe listener on 127.0.0.1:0", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| TestingError::io("reading the probe listener's address", e))?;
    Ok(addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_or_refused() {
        assert_eq!(parse_range("21000-21999").ok(), Some((21000, 21999)));
        assert_eq!(parse_range(" 5 - 5 ").ok(), Some((5, 5)));
        for bad in ["", "21000", "0-10", "10-5", "1-70000", "a-b"] {
            let error = parse_range(bad).expect_err(bad).to_string();
            assert!(error.contains("FIRST-LAST"), "{bad}: {error}");
        }
    }

    /// Ports come from the range, never twice, and skip a port something listens on.
    #[test]
    fn ports_come_from_the_range_and_skip_busy_ones() {
        let busy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = busy.local_addr().expect("addr").port();
        let (first, last) = (port, port.saturating_add(3));
        let mut issued = HashSet::new();
        let mut got = Vec::new();
        while let Ok(p) = free_in_range(first, last, &mut issued) {
            got.push(p);
        }
        assert!(!got.contains(&port), "{port} is busy: {got:?}");
        assert!(got.iter().all(|p| (first..=last).contains(p)), "{got:?}");
        let distinct: HashSet<_> = got.iter().collect();
        assert_eq!(distinct.len(), got.len(), "{got:?}");
    }

    /// Ports handed out by one process never repeat, even when asked for from many threads.
    #[test]
    fn free_ports_never_repeat() {
        let handles: Vec<_> = (0..8)
            .map(|_| std::thread::spawn(|| (0..16).map(|_| free_port()).collect::<Vec<_>>()))
            .collect();
        let mut seen = HashSet::new();
        for handle in handles {
            for port in handle.join().expect("thread panicked") {
                let port = port.expect("free port");
                assert_ne!(port, 0);
                assert!(seen.insert(port), "port {port} handed out twice");
            }
        }
    }
}
