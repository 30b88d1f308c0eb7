//! The exit codes of `quorumlock`, chosen from the BSD `sysexits.h` range so that they do not
//! collide with the small codes commands commonly use for their own failures. Each code means
//! one thing, so that a cron wrapper can tell "ran elsewhere" from "broken here".

use std::process::ExitCode;

/// Bad command line or configuration (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// Too few masters answered or counted to decide (`EX_UNAVAILABLE`): unreachable, or
/// quarantined under restart protection, for longer than `--max-unavailable` when waiting.
/// Nothing ran.
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lock is held elsewhere (or the wait for it ran out while it was): the command did not
/// run (`EX_TEMPFAIL`: try again later).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The lock was lost (or reached `--max-hold`) while the command ran; the command was sent
/// SIGTERM, then SIGKILL after `--kill-after` (`EX_PROTOCOL`).
pub(crate) const LOCK_LOST: u8 = 76;
/// `provision` or `clear` refused to write without `--force`; nothing was written
/// (`EX_NOPERM`).
pub(crate) const REFUSED: u8 = 77;
/// The masters refused the configuration: wrong or missing credentials, an ACL that forbids
/// the commands, a key of another type (`EX_CONFIG`). Retrying does not help.
pub(crate) const MISCONFIGURED: u8 = 78;
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

/// The table printed at the end of `--help` (a macro, so that `concat!` can add examples);
/// docs/cli.md carries the same table.
macro_rules! exit_codes_help {
    () => {
        "\
Exit codes:
  0        success (exec/elect: the command exited 0)
  N        exec/elect: the command's own exit code, passed through (keep your own codes out
           of 64-80 to tell them from quorumlock's)
  64       usage or configuration error (bad flag, duration, node URL); nothing was sent
  69       unavailable: too few masters answered or counted (down, or quarantined by
           --restart-protection; for longer than --max-unavailable when waiting); the command
           did not run
  75       held elsewhere: the lock (or leadership) was not acquired, or --wait ran out while
           it was held; the command did not run
  76       exec/elect: lock or leadership lost (or --max-hold reached) while the command ran;
           it was terminated
  77       provision/clear: refused without --force; nothing was written
  78       misconfigured: masters refused the credentials, or answered an error retrying cannot
           fix (ACL, wrong key type); the command did not run
  79       exec --once: the slot already completed, or runs elsewhere; the command did not run
  80       exec --once: the slot's runner failed or died (see --retry-abandoned); not run
  126/127  exec/elect: the command could not be started / was not found
  128+N    exec/elect: the command was killed by signal N (or the wait was interrupted by it)"
    };
}
pub(crate) use exit_codes_help;

/// An outcome as the process exit code.
pub(crate) fn code(value: u8) -> ExitCode {
    ExitCode::from(value)
}
