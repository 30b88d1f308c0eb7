//! Free loopback ports for the servers: from `QUORUMLOCK_TEST_PORTS` when it is set (as the
//! redis masters of the test kit take theirs), else what the kernel offers.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

use super::ServerError;

/// Ports this process handed out from the kernel's offers: a port is offered again as soon as
/// its probe listener closes, and servers of parallel tests must not be given the same one.
static ISSUED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// How many times a server is started on fresh ports when one was taken meanwhile.
const START_ATTEMPTS: u32 = 3;

/// How many kernel offers to look at before giving up.
const MAX_PROBES: usize = 64;

/// Runs `start` (which takes fresh ports each time) again when another process won the race
/// for one of its ports, up to [`START_ATTEMPTS`] times in all.
pub(crate) fn on_fresh_ports<T>(
    mut start: impl FnMut() -> Result<T, ServerError>,
) -> Result<T, ServerError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if e.is_addr_in_use() && attempt < START_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

/// A port on 127.0.0.1 nothing listened on a moment ago, never handed out before by this
/// process.
pub(crate) fn free_port() -> Result<u16, ServerError> {
    let from_range = quorumlock::testing::listener_port()?;
    if from_range != 0 {
        return Ok(from_range);
    }
    let mut issued = ISSUED.lock().unwrap_or_else(PoisonError::into_inner);
    let issued = issued.get_or_insert_with(HashSet::new);
    for _ in 0..MAX_PROBES {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| ServerError::io("binding a probe listener on 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the probe listener's address", e))?
            .port();
        if issued.insert(port) {
            return Ok(port);
        }
    }
    Err(ServerError::io(
        "finding a free port on 127.0.0.1",
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("the kernel offered only ports already handed out after {MAX_PROBES} probes"),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_never_repeat() {
        let mut seen = HashSet::new();
        for _ in 0..32 {
            let port = free_port().expect("free port");
            assert!(seen.insert(port), "{port} handed out twice");
        }
    }
}
