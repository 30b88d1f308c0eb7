//! The library's outside world, simulated: its sockets are turmoil's, its wall clock is the
//! simulation's (off by what the nemesis says: the clients' clocks jump), it is never suspended,
//! and its randomness comes from the seed.
//!
//! Every draw made while a workload operation's future is polled ([`SimWorld::tagged`]) is
//! remembered with that operation, so that a lock value found on a master names the operation
//! that drew it ([`SimWorld::drawn_by`]): the key-lifetime checker attributes keys that way.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::sim::{Connecting, Stream, World};

use crate::seed::SeedRng;

/// What every client of one simulation takes from outside the library.
pub struct SimWorld {
    rng: RefCell<SeedRng>,
    /// How far the clients' wall clocks are off true time, in µs (the nemesis moves it).
    pub clock_offset_us: Cell<i64>,
    /// The operation whose future is being polled, if any.
    polling: Cell<Option<u32>>,
    /// Every draw made while an operation was polled, as [`first_half`] of a lock value would
    /// read it back, to that operation. Looked up only, never walked: its order is irrelevant.
    drawn: RefCell<HashMap<u64, u32>>,
}

/// The bits of a draw that a lock value keeps in its first 16 hex digits: the library makes the
/// value a v4 UUID from two draws, the first in its first 8 bytes (little-endian), and the UUID
/// overwrites the high nibble of byte 6 with its version.
const KEPT: u64 = !(0xF0 << 48);

/// The first draw behind a lock value (32 hex digits, then anything: an election's value carries
/// `:identity`), masked as `KEPT`; `None` for a value that is no UUID of ours.
pub fn first_half(value: &[u8]) -> Option<u64> {
    let hex = value.get(..16)?;
    let mut bytes = [0u8; 8];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        bytes[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(u64::from_le_bytes(bytes) & KEPT)
}

impl SimWorld {
    /// The world of a simulation whose library randomness comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: RefCell::new(SeedRng::new(seed)),
            clock_offset_us: Cell::new(0),
            polling: Cell::new(None),
            drawn: RefCell::new(HashMap::new()),
        }
    }

    /// `future`, every poll of which counts as operation `op`'s: the draws made meanwhile
    /// (its lock values) are remembered as that operation's.
    pub async fn tagged<F: Future>(&self, op: u32, future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| {
            let outer = self.polling.replace(Some(op));
            let polled = future.as_mut().poll(cx);
            self.polling.set(outer);
            polled
        })
        .await
    }

    /// The operation that drew the lock value `value`, if a tagged one did.
    pub fn drawn_by(&self, value: &[u8]) -> Option<u32> {
        let half = first_half(value)?;
        self.drawn.borrow().get(&half).copied()
    }
}

impl World for SimWorld {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let host = host.to_owned();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(Box::new(stream) as Box<dyn Stream>)
        })
    }

    fn suspended(&self) -> Duration {
        Duration::ZERO
    }

    fn wall_clock(&self) -> SystemTime {
        let true_time = UNIX_EPOCH + turmoil::since_epoch().unwrap_or_default();
        let offset = self.clock_offset_us.get();
        let by = Duration::from_micros(offset.unsigned_abs());
        match offset < 0 {
            true => true_time - by,
            false => true_time + by,
        }
    }

    fn random_u64(&self) -> u64 {
        let draw = self.rng.borrow_mut().next_u64();
        if let Some(op) = self.polling.get() {
            self.drawn.borrow_mut().insert(draw & KEPT, op);
        }
        draw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_value_reads_back_its_first_draw() {
        // What the library makes of draws `a`, `b`: a v4 UUID of their little-endian bytes.
        let (a, b) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
        bytes[6] = (bytes[6] & 0x0F) | 0x40;
        bytes[8] = (bytes[8] & 0x3F) | 0x80;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(first_half(hex.as_bytes()), Some(a & KEPT));
        let election = format!("{hex}:host-a");
        assert_eq!(first_half(election.as_bytes()), Some(a & KEPT));
        assert_eq!(first_half(b"c0s1#4"), None);
    }
}
