//! Free TCP ports on the loopback interface.

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

/// Returns a port on 127.0.0.1 that nothing listened on a moment ago and that this process has
/// not handed out before.
pub(super) fn free_port() -> Result<u16, TestingError> {
    let mut issued = ISSUED.lock().unwrap_or_else(PoisonError::into_inner);
    let issued = issued.get_or_insert_with(HashSet::new);
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
