//! Faults outside the lock's model, which must break it: a master's clock jumping further than
//! the drift bound, masters restarting empty under clients that run without restart
//! protection, and holders paused past their leases counting on them all the same. A run with one of them is expected to break mutual exclusion (as jepsen-lite's
//! clock and restart cells break on real masters); `scripts/sim.sh --beyond NAME` exits 0 only
//! when a seed broke, so that the model's edge is shown, not assumed. Runs without `--beyond`
//! never inject them: there any violation is a defect.

use std::time::Duration;

/// A fault outside the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beyond {
    /// A master's clock jumps ahead by one to four of the longest TTL (an NTP step, an operator
    /// setting the date), far beyond the drift the library allows for: the keys there expire
    /// early, and another client's quorum may take what a holder still counts on.
    ClockJump,
    /// The clients run without restart protection, and masters crash and come back empty at
    /// once: a restarted master forgets the locks it granted and grants them again.
    UnprotectedRestarts,
    /// Client processes paused (every fault of the nemesis's second stream) and their holders'
    /// beliefs counted in
    /// full: a holder frozen past its lease's validity resumes believing it holds, as an
    /// application that acts on a lease without looking at it after a GC pause. Runs without
    /// it cut such beliefs at the lease's validity (`checker::cap_paused`).
    PausedHolders,
}

impl Beyond {
    /// Every fault outside the model, in the order of the docs.
    pub const ALL: [Self; 3] = [
        Self::ClockJump,
        Self::UnprotectedRestarts,
        Self::PausedHolders,
    ];

    /// The name `--beyond` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::ClockJump => "clock-jump",
            Self::UnprotectedRestarts => "unprotected-restarts",
            Self::PausedHolders => "paused-holders",
        }
    }

    /// The fault named `name`.
    ///
    /// # Errors
    ///
    /// An unknown name, with the known ones.
    pub fn by_name(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|b| b.name()).collect();
                format!("unknown fault {name:?}; known: {}", known.join(", "))
            })
    }

    /// How far a master's clock jumps ahead, given a draw in `0..1000`: one to four times the
    /// longest TTL a client asks for.
    pub fn jump(max_ttl: Duration, draw: u64) -> Duration {
        max_ttl + max_ttl.mul_f64(3.0 * (draw % 1000) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_is_found_by_its_name() {
        for beyond in Beyond::ALL {
            assert_eq!(Beyond::by_name(beyond.name()), Ok(beyond));
        }
        let error = Beyond::by_name("clock").expect_err("no fault is named clock");
        assert!(error.contains("clock-jump") && error.contains("unprotected-restarts"));
    }

    #[test]
    fn a_jump_is_beyond_the_longest_ttl() {
        let ttl = Duration::from_secs(2);
        assert_eq!(Beyond::jump(ttl, 0), ttl);
        assert_eq!(Beyond::jump(ttl, 999), Duration::from_millis(7994));
    }
}
