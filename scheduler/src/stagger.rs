//! The order in which the workers claim a slot, fixed by a hash of the worker, the job and the
//! slot (rendezvous hashing), so that it changes from slot to slot:
//!
//! * without a fleet, each worker waits a delay in `[0, spread)` from that hash ([`stagger`]):
//!   the workers claim one after the other, without knowing each other;
//! * with a [fleet](crate::SchedulerBuilder::fleet), each worker knows its **rank** among the
//!   fleet for the slot ([`rank`]): the first claims at once, the k-th the clock skew bound plus
//!   `k` backup delays later ([`backup_delay`]), and only if the slot has not run by then does
//!   its claim win anything.
//!
//! Each worker counts its delay on its own clock, so a clock ahead of the others' by more than
//! a delay claims first: without a fleet the stagger orders the claims only among clocks closer
//! than it; with one, the skew bound in every backup's delay keeps each slot to its first-ranked
//! worker. Either way the order only decides who is likely to claim first: the claims on a
//! quorum alone make a slot run once.

use std::time::Duration;

/// A worker's score for slot `slot` of `job`: the lowest score claims first.
fn score(worker: &str, job: &str, slot: &str) -> u64 {
    // FNV-1a over the three names (each followed by its length, so no two triples collide by
    // moving bytes between names), then a finalizer that spreads every bit over the result.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [worker, job, slot] {
        for byte in part.bytes().chain((part.len() as u64).to_le_bytes()) {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    mix(h)
}

/// How long `worker` waits after slot `slot` of `job` falls due before claiming it.
pub(crate) fn stagger(worker: &str, job: &str, slot: &str, spread: Duration) -> Duration {
    let Ok(spread_ns) = u64::try_from(spread.as_nanos()) else {
        return spread;
    };
    if spread_ns == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(score(worker, job, slot) % spread_ns)
}

/// A fleet's jitter for slot `slot` of `job`: a delay in `[0, max)` fixed by a hash of the job
/// and the slot alone, so that every worker of the fleet draws the same one and the ranking,
/// shifted as a whole, holds (independent draws per worker would let a backup's short draw
/// overtake the first-ranked worker's long one). It still differs from job to job and from slot
/// to slot, which is what spreads the claims of many jobs due at the same instant.
pub(crate) fn fleet_jitter(job: &str, slot: &str, max: Duration) -> Duration {
    stagger("", job, slot, max)
}

/// `worker`'s rank among `fleet` for slot `slot` of `job`: how many workers of the fleet
/// (other than `worker`) come before it. Every worker of a fleet computes the same order, so
/// for each slot exactly one has rank 0. Ties (equal scores) go by name.
pub(crate) fn rank(worker: &str, fleet: &[std::sync::Arc<str>], job: &str, slot: &str) -> usize {
    let mine = (score(worker, job, slot), worker);
    fleet
        .iter()
        .filter(|w| &***w != worker && (score(w, job, slot), &***w) < mine)
        .count()
}

/// How long after a slot falls due the worker of rank `rank` claims it: at once for the first;
/// a backup waits `max_skew` more than `rank` backup delays, so that its clock, even if it runs
/// `max_skew` ahead of the first-ranked worker's, falls due `rank` backup delays after it.
pub(crate) fn backup_delay(rank: usize, backup_after: Duration, max_skew: Duration) -> Duration {
    if rank == 0 {
        return Duration::ZERO;
    }
    backup_after
        .saturating_mul(u32::try_from(rank).unwrap_or(u32::MAX))
        .saturating_add(max_skew)
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// For every slot, the ranks of a fleet's workers are 0, 1, ..., n - 1 (exactly one first),
    /// and each worker is first about as often as the others.
    #[test]
    fn ranks_order_the_fleet_and_change_from_slot_to_slot() {
        let fleet: Vec<Arc<str>> = ["w0", "w1", "w2", "w3", "w4"]
            .iter()
            .map(|w| Arc::from(*w))
            .collect();
        let mut first = [0u32; 5];
        for slot in 0..5000 {
            let slot = format!("2024-05-01T03:{:02}:{:02}.000Z", slot / 60, slot % 60);
            let mut ranks: Vec<usize> = fleet
                .iter()
                .map(|w| rank(w, &fleet, "job", &slot))
                .collect();
            if let Some(i) = ranks.iter().position(|r| *r == 0) {
                first[i] += 1;
            }
            ranks.sort_unstable();
            assert_eq!(ranks, vec![0, 1, 2, 3, 4], "slot {slot}");
        }
        for n in first {
            assert!(
                (800..1200).contains(&n),
                "first claims per worker: {first:?}"
            );
        }
        // A worker outside the list ranks among it all the same.
        assert!(rank("w9", &fleet, "job", "s") <= 5);
    }

    const SPREAD: Duration = Duration::from_millis(20);

    #[test]
    fn the_delay_is_fixed_and_within_the_spread() {
        let a = stagger("w1", "job", "2024-05-01T03:00:00.000Z", SPREAD);
        assert_eq!(a, stagger("w1", "job", "2024-05-01T03:00:00.000Z", SPREAD));
        assert!(a < SPREAD);
        assert_eq!(stagger("w1", "job", "s", Duration::ZERO), Duration::ZERO);
        assert_eq!(stagger("w1", "job", "s", Duration::MAX), Duration::MAX);
    }

    /// Five workers over many slots: each claims first about as often as the others (a hash
    /// that left the slot out would put one worker first every time), and the first usually
    /// leads the second by more than a claim round takes.
    #[test]
    fn each_worker_claims_first_about_as_often() {
        let workers = ["w0", "w1", "w2", "w3", "w4"];
        let mut first = [0u32; 5];
        let mut wide = 0u32;
        const SLOTS: u32 = 5000;
        for slot in 0..SLOTS {
            let slot = format!("2024-05-01T03:{:02}:{:02}.000Z", slot / 60, slot % 60);
            let mut delays: Vec<(Duration, usize)> = workers
                .iter()
                .enumerate()
                .map(|(i, w)| (stagger(w, "job", &slot, SPREAD), i))
                .collect();
            delays.sort();
            first[delays[0].1] += 1;
            wide += u32::from(delays[1].0 - delays[0].0 >= Duration::from_millis(1));
        }
        for n in first {
            assert!(
                (800..1200).contains(&n),
                "first claims per worker: {first:?}"
            );
        }
        // Uniform delays: the gap exceeds 1 ms of 20 with probability 0.95^5 = 0.77.
        assert!(
            wide > SLOTS * 7 / 10,
            "{wide} of {SLOTS} slots with a gap of 1 ms"
        );
    }
}
