//! The nearest-rank percentile: the one definition the scheduler's lateness, the jepsen-lite
//! checkers and reports and the library's `measure` example share.

/// The nearest-rank `q`-quantile (`q` a fraction, 0 to 1; clamped) of values sorted in ascending
/// order: the smallest value with at least `q` of the values at or below it, so always one of
/// the values (the first for `q` = 0, the last for `q` = 1). `None` when there are none.
///
/// The rank is computed on `q` in millionths, as integers: `q * len` in floating point lands
/// just above a whole number for some fractions (0.07 × 100 = 7.000000000000001), which would
/// take the next value.
///
/// # Examples
///
/// ```
/// use quorumlock_scheduler::nearest_rank;
///
/// let sorted: Vec<u32> = (1..=100).collect();
/// assert_eq!(nearest_rank(&sorted, 0.5), Some(50));
/// assert_eq!(nearest_rank(&sorted, 0.99), Some(99));
/// assert_eq!(nearest_rank::<u32>(&[], 0.5), None);
/// ```
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    const MILLION: u128 = 1_000_000;
    if sorted.is_empty() {
        return None;
    }
    // In 0..=MILLION after the clamp (NaN becomes 0), so the cast is exact.
    let millionths = (q.clamp(0.0, 1.0) * MILLION as f64).round() as u128;
    let rank = (sorted.len() as u128 * millionths).div_ceil(MILLION);
    let rank = usize::try_from(rank).unwrap_or(usize::MAX);
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_of_one_to_a_hundred() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(50));
        assert_eq!(nearest_rank(&v, 0.95), Some(95));
        assert_eq!(nearest_rank(&v, 0.99), Some(99));
        assert_eq!(nearest_rank(&v, 1.0), Some(100));
        assert_eq!(nearest_rank(&v, 0.07), Some(7));
    }

    #[test]
    fn small_and_empty_inputs() {
        let ten: Vec<i64> = (1..=10).collect();
        assert_eq!(nearest_rank(&ten, 0.5), Some(5));
        assert_eq!(nearest_rank(&ten, 0.99), Some(10));
        assert_eq!(nearest_rank(&ten, 0.0), Some(1));
        assert_eq!(nearest_rank(&[7.0], 0.5), Some(7.0));
        assert_eq!(nearest_rank(&[1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(nearest_rank::<i64>(&[], 0.5), None);
        assert_eq!(nearest_rank(&ten, f64::NAN), Some(1));
        assert_eq!(nearest_rank(&ten, 2.0), Some(10));
    }

    /// The rank is exactly ⌈len × p / 100⌉ (at least 1) for every percentile the project reports.
    #[test]
    fn rank_is_the_exact_ceiling() {
        for len in 1..=1000usize {
            let v: Vec<usize> = (1..=len).collect();
            for p in [50, 95, 99, 100] {
                let want = (len * p).div_ceil(100).max(1);
                assert_eq!(
                    nearest_rank(&v, p as f64 / 100.0),
                    Some(want),
                    "p{p} of {len}"
                );
            }
        }
    }
}
