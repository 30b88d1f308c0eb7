//! Everything a simulated master would draw at random (its `run_id`), drawn from one seed with
//! SplitMix64: small, fast, and the same on every platform.

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SeedRng {
    state: u64,
}

impl SeedRng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, n)` (`0` for `n = 0`); the modulo bias is negligible for small `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }

    /// True once in `n` draws, on average.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// 40 lowercase hex digits, the shape of a Redis `run_id`.
    pub fn run_id(&mut self) -> String {
        let words = [self.next_u64(), self.next_u64(), self.next_u64()];
        let hex: String = words.iter().map(|w| format!("{w:016x}")).collect();
        hex[..40].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_one_sequence() {
        let (mut a, mut b) = (SeedRng::new(7), SeedRng::new(7));
        assert_eq!(a.run_id(), b.run_id());
        assert_ne!(a.run_id(), SeedRng::new(8).run_id());
        assert!(a.run_id().bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
