//! The restored-backup restart kind: a master's persistence files copied aside, then, after a
//! crash, the master started again from that copy; and the proof that it came back with the
//! copy's older data.
//!
//! The proof is a probe key written twice: once before the copy (`before-<stamp>`), once after
//! it (`after-<stamp>`). A master restored from the copy reads `before-<stamp>`; a plain
//! restart of a durable master would read `after-<stamp>`, one restarted empty nothing.

use quorumlock_testkit::{Backup, RedisMaster, TestingError};

/// The probe key; outside the lock prefix, so no checker counts it as a lock key.
const PROBE_KEY: &str = "jepsen-lite:backup-probe";

/// A backup of one master, and the probe values written around it.
#[derive(Debug)]
pub struct Taken {
    backup: Backup,
    stamp: u64,
}

impl Taken {
    /// Copies `master`'s persistence files aside, between the two probe writes.
    ///
    /// # Errors
    ///
    /// When a probe cannot be written or the copy made.
    pub fn from(master: &RedisMaster) -> Result<Self, TestingError> {
        let stamp = crate::clock::now_ns();
        master.command(&["SET", PROBE_KEY, &format!("before-{stamp}")])?;
        let backup = master.backup()?;
        master.command(&["SET", PROBE_KEY, &format!("after-{stamp}")])?;
        Ok(Self { backup, stamp })
    }

    /// Restores `master` from the copy (it is killed first if it runs).
    ///
    /// # Errors
    ///
    /// When the data cannot be replaced or the master does not come back.
    pub fn restore(&self, master: &mut RedisMaster) -> Result<(), TestingError> {
        master.restore(&self.backup)
    }

    /// Whether `master` now serves the copy's data: its probe reads the value written before
    /// the copy, not the one acknowledged after it.
    pub fn proof(&self, master: &RedisMaster) -> Result<String, String> {
        let before = format!("before-{}", self.stamp);
        match master.command(&["GET", PROBE_KEY]) {
            Ok(value) if value == before => Ok(
                "back with the backup's data: a write acknowledged after the backup is gone"
                    .to_string(),
            ),
            Ok(value) => Err(format!(
                "not back with the backup's data: the probe reads {value:?}, expected {before:?}"
            )),
            Err(e) => Err(format!("cannot read the probe: {e}")),
        }
    }
}
