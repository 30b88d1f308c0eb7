//! The exit codes of `quorumlock`, chosen from the BSD `sysexits.h` range so that they do not
//! collide with the small codes commands commonly use for their own failures.

use std::process::ExitCode;

/// Bad command line or configuration (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// `status` or `provision`: too few nodes answered (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// `provision`: a node started less than one max TTL ago and `--force` was not given; nothing
/// was written (`EX_TEMPFAIL`: try again later). The same code as [`NOT_ACQUIRED`].
pub(crate) const REFUSED: u8 = 75;
/// `exec`: the lock was not acquired (held elsewhere, or no quorum reachable) and the command
/// did not run (`EX_TEMPFAIL`: try again later).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// `exec`: the lock was lost (or reached `--max-hold`) while the command ran; the command was
/// sent SIGTERM, then SIGKILL after `--kill-after` (`EX_PROTOCOL`).
pub(crate) const LOCK_LOST: u8 = 76;
/// `exec --once`: the slot already ran to completion, or runs elsewhere now; the command did
/// not run. Outside `sysexits.h` (64–78), so it is not mistaken for a failure of quorumlock.
pub(crate) const SLOT_TAKEN: u8 = 79;
/// `exec --once`: a runner claimed the slot and failed or died without completing it, and
/// `--retry-abandoned` was not given; the command did not run.
pub(crate) const SLOT_ABANDONED: u8 = 80;
/// `exec`: the command was found but could not be started, as in a shell.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// `exec`: the command was not found, as in a shell.
pub(crate) const NOT_FOUND: u8 = 127;

/// The table printed at the end of `--help` (a macro, so that `concat!` can add examples).
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  0        success (exec: the command exited 0)
  N        exec: the command's own exit code, passed through (keep your own codes out of
           64-80 to tell them from quorumlock's)
  64       usage or configuration error (bad flag, duration, node URL)
  69       status/provision: too few nodes answered
  75       exec: lock not acquired; the command did not run
           provision: a node started less than one max TTL ago (see --force); nothing written
  76       exec: lock lost (or --max-hold reached) while the command ran; it was terminated
  79       exec --once: the slot already completed, or runs elsewhere; the command did not run
  80       exec --once: the slot's runner failed or died (see --retry-abandoned); not run
  126/127  exec: the command could not be started / was not found
  128+N    exec: the command was killed by signal N (or the wait was interrupted by it)"
    };
}
pub(crate) use exit_codes_help;

/// An outcome as the process exit code.
pub(crate) fn code(value: u8) -> ExitCode {
    ExitCode::from(value)
}
