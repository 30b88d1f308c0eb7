//! A master's persistence files copied aside, and the master restored from them: what an
//! operator does when a master's disk is lost and it comes back from an earlier backup.

use std::path::Path;

use tempfile::TempDir;

use super::master::LOG_FILE;
use super::startup::STDERR_FILE;
use super::{RedisMaster, TestingError};

/// How many times [`RedisMaster::backup`] copies again when a file vanished under it (an AOF
/// rewrite replaces the files it copies).
const COPY_ATTEMPTS: u32 = 3;

/// A copy of a master's persistence files (its AOF directory, its RDB snapshot) as they were
/// when [`RedisMaster::backup`] took it. Restoring it with [`RedisMaster::restore`] brings the
/// master back with exactly that data: every write since, locks and their epoch markers
/// included, is gone. The copy is removed when the `Backup` is dropped.
#[derive(Debug)]
pub struct Backup {
    dir: TempDir,
    port: u16,
}

impl Backup {
    /// The directory holding the copied files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port of the master it was taken from.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl RedisMaster {
    /// Copies the master's persistence files aside as they are on disk now, while it keeps
    /// running: with [`Persistence::AofAlways`](super::Persistence::AofAlways) that is every
    /// acknowledged write, with `AofEverySec` all but the last second's, and without an AOF the
    /// last RDB snapshot (take one with `SAVE` first), if any. The server's logs are not copied.
    ///
    /// # Errors
    ///
    /// [`TestingError::Io`] if the copy cannot be made.
    pub fn backup(&self) -> Result<Backup, TestingError> {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-backup-")
            .tempdir()
            .map_err(|e| TestingError::io("creating a backup directory", e))?;
        let mut attempt = 1;
        loop {
            match copy_data(self.dir(), dir.path()) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < COPY_ATTEMPTS => {
                    attempt += 1;
                    clear(dir.path())
                        .map_err(|e| TestingError::io("clearing a failed backup", e))?;
                }
                Err(e) => {
                    let context = format!("backing up {}", self.dir().display());
                    return Err(TestingError::io(context, e));
                }
            }
        }
        Ok(Backup {
            dir,
            port: self.port,
        })
    }

    /// Kills the server (a crash, if it runs), replaces everything in its data directory but
    /// its logs with the files of `backup`, and starts it again on the same port: a master
    /// restored from a backup, back with the backup's data whatever it held since. A backup of
    /// another master may be restored too (as an operator might, by mistake).
    ///
    /// # Errors
    ///
    /// As [`restart`](Self::restart), and [`TestingError::Io`] if the data cannot be replaced.
    pub fn restore(&mut self, backup: &Backup) -> Result<(), TestingError> {
        self.kill()?;
        self.wipe()?;
        copy_data(backup.dir(), self.dir())
            .map_err(|e| TestingError::io(format!("restoring {}", backup.dir().display()), e))?;
        self.spawn()?;
        self.boot(false)
    }
}

/// Copies every file and directory of `from` into `to`, but the server's logs.
fn copy_data(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == LOG_FILE || name == STDERR_FILE {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_data(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Empties `dir`.
fn clear(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}
