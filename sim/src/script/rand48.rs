//! The `math.random` of Redis scripts: Redis replaces Lua's with its own `rand48`, a C static
//! that starts, in every process, from `lrand48`'s unseeded state and runs on across scripts
//! (Redis 7.0 no longer reseeds it per script; `math.randomseed` does). So a master's "random"
//! numbers depend only on the scripts it ran since it started: deterministic, as the
//! simulation needs.

/// The 48-bit linear congruential generator of `lrand48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rand48 {
    state: u64,
}

const MASK: u64 = (1 << 48) - 1;

impl Rand48 {
    /// The generator as a process starts it, before any `srand48`.
    pub fn unseeded() -> Self {
        Self {
            state: 0x1234_ABCD_330E,
        }
    }

    /// The generator as `srand48(seed)` leaves it.
    pub fn seeded(seed: i32) -> Self {
        // The seed's 32 bits go above the fixed low word 0x330E, as in `srand48`.
        let seed = u64::from(seed as u32);
        Self {
            state: (seed << 16 | 0x330E) & MASK,
        }
    }

    /// The next `lrand48()`: 31 bits.
    pub fn draw(&mut self) -> i32 {
        self.state = (self.state.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB)) & MASK;
        // The top 31 of 48 bits: below 2^31, so the conversion never fails.
        i32::try_from(self.state >> 17).unwrap_or(i32::MAX)
    }

    /// A float in `[0, 1)` as Redis's `math.random` draws it.
    pub fn unit(&mut self) -> f64 {
        let max = f64::from(i32::MAX);
        f64::from(self.draw() % i32::MAX) / max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_c_library_sequence() {
        // glibc's lrand48 after srand48(0).
        let mut r = Rand48::seeded(0);
        assert_eq!(
            [r.draw(), r.draw(), r.draw()],
            [366_850_414, 1_610_402_240, 206_956_554]
        );
        // And redis-server's first two `math.random(100000)` after it starts.
        let mut r = Rand48::unseeded();
        let draws = [r.unit(), r.unit()].map(|u| (u * 100_000.0).floor() + 1.0);
        assert_eq!(draws, [39_647.0, 84_049.0]);
    }
}
