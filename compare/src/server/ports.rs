//! Starting a server on fresh ports: the ports come from the test kit's `free_port` (the range
//! in `QUORUMLOCK_TEST_PORTS` when it is set), and a start that lost the race for one of them to
//! another process is tried again on new ones.

use super::ServerError;

/// How many times a server is started on fresh ports when one was taken meanwhile.
const START_ATTEMPTS: u32 = 3;

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
