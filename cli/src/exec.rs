//! `quorumlock exec`: acquire, run the command under a lease, terminate it if the lock is lost,
//! release.

use std::time::{Duration, Instant};

use quorumlock::{LockError, LockGuard, MultiLockGuard, Redlock};
use tokio::process::Command;

use crate::args::{Connection, ExecArgs};
use crate::duration::deadline_after;
use crate::exit;
use crate::failure;
use crate::once::{self, Held};
use crate::progress::{watched, Waited, Watch};
use crate::signals::{self, Forwarded};
use crate::supervise::{self, Ended};

/// How far ahead each `lock_until` of an unbounded wait looks; it is simply called again.
const WAIT_SLICE: Duration = Duration::from_secs(3600);

/// Runs `quorumlock exec`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, conn: &Connection, args: ExecArgs) -> u8 {
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("quorumlock: cannot install signal handlers: {error}");
            return exit::USAGE;
        }
    };
    let held = tokio::select! {
        held = hold(locks, conn, &args) => match held {
            Ok(held) => held,
            Err(code) => return code,
        },
        signal = signals.next() => {
            eprintln!("quorumlock: {signal} while waiting for the lock on {:?}; the command did not run", args.resource);
            return signals::exit_code(signal);
        }
    };
    let fence = held.fence();
    let lease = held.handle();

    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => {
            eprintln!("quorumlock: no command given: expected `-- COMMAND [ARGS...]`");
            held.finish(&args, false).await;
            return exit::USAGE;
        }
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("QUORUMLOCK_RESOURCE", &args.resource)
        // Own process group: on a lost lock the whole tree the command started is signalled,
        // not only a shell that would leave its children running.
        .process_group(0);
    if let Some(fence) = fence {
        command.env("QUORUMLOCK_FENCE", fence.to_string());
    }
    if let Held::Slot(run) = &held {
        command
            .env("QUORUMLOCK_SLOT", run.slot())
            .env("QUORUMLOCK_ATTEMPT", run.attempt().to_string());
    }
    let child = match supervise::spawn(&mut command, program.as_ref()) {
        Ok(child) => child,
        Err(code) => {
            held.finish(&args, false).await;
            return code;
        }
    };
    let ended = child
        .run(lease.lost(), "", args.kill_after, &mut signals)
        .await;
    let Ended::Exited(status) = ended else {
        held.finish(&args, false).await;
        return exit::LOCK_LOST;
    };
    // A slot is completed only by a command that exited 0; any other end abandons it, so that
    // --retry-abandoned can run it again.
    let succeeded = matches!(&status, Ok(status) if status.success());
    held.finish(&args, succeeded).await;
    supervise::exit_code(status)
}

/// Takes what the command runs under: the slot of `--once`, or the lock, kept alive by a
/// lease (with `--max-hold` and `--hold-at-least`). `Err` is the exit code when the command
/// must not run (the reason printed).
async fn hold(locks: &Redlock, conn: &Connection, args: &ExecArgs) -> Result<Held, u8> {
    if let Some(slot) = &args.once {
        return once::claim(locks, conn, args, slot).await.map(Held::Slot);
    }
    let what = Mode::of(args).what(&args.resource);
    let acquired = if args.no_wait {
        // Over within about a second: nothing to report on the way.
        acquire(locks, args).await
    } else {
        let watch = Watch {
            locks,
            conn,
            resource: &args.resource,
            what: what.clone(),
            max_unavailable: args.max_unavailable,
            holder_known: Mode::of(args) == Mode::Lock,
        };
        match watched(acquire(locks, args), &watch).await {
            Waited::Done(acquired) => acquired,
            Waited::Unavailable(survey, waited) => {
                let what = format!("{what} not acquired; the command did not run");
                return Err(failure::unavailable(&what, &survey, waited));
            }
        }
    };
    let acquired = match acquired {
        Ok(acquired) => acquired,
        Err(error) => {
            let what = format!("{what} not acquired; the command did not run");
            if Mode::of(args) != Mode::Lock {
                return Err(failure::plain(&what, &error));
            }
            return Err(failure::report(locks, conn, &args.resource, &what, &error).await);
        }
    };
    let leased = match acquired {
        Acquired::One(guard) => guard
            .keep_alive(once::lease_options(args))
            .map_err(|rejected| (rejected.to_string(), Acquired::One(rejected.into_guard()))),
        Acquired::All(guard) => guard
            .keep_alive(once::lease_options(args))
            .map_err(|rejected| (rejected.to_string(), Acquired::All(rejected.into_guard()))),
    };
    match leased {
        Ok(lease) => Ok(Held::Lock(lease)),
        Err((rejected, guard)) => {
            eprintln!("quorumlock: {rejected}");
            let _ = match guard {
                Acquired::One(guard) => guard.release().await,
                Acquired::All(guard) => guard.release().await,
            };
            Err(exit::USAGE)
        }
    }
}

/// What `exec` holds while the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The lock RESOURCE.
    Lock,
    /// One of K permits of the semaphore RESOURCE (`--permits K`).
    Permit(usize),
    /// A read permit of the read-write lock RESOURCE (`--shared`).
    Shared(usize),
    /// The read-write lock RESOURCE alone (`--exclusive`).
    Exclusive(usize),
}

impl Mode {
    fn of(args: &ExecArgs) -> Self {
        let readers = args.readers.unwrap_or(quorumlock::defaults::RW_READERS);
        match (args.permits, args.shared, args.exclusive) {
            (Some(permits), _, _) => Mode::Permit(permits),
            (None, true, _) => Mode::Shared(readers),
            (None, false, true) => Mode::Exclusive(readers),
            (None, false, false) => Mode::Lock,
        }
    }

    /// For messages: `the lock on "x"`, ...
    fn what(self, resource: &str) -> String {
        match self {
            Mode::Lock => format!("the lock on {resource:?}"),
            Mode::Permit(k) => format!("a permit of the semaphore {resource:?} ({k} permits)"),
            Mode::Shared(_) => format!("a read permit of the read-write lock {resource:?}"),
            Mode::Exclusive(_) => format!("the read-write lock {resource:?} alone"),
        }
    }
}

/// A guard of one key (a lock, a permit, a read permit) or of a set (a writer).
enum Acquired {
    One(LockGuard),
    All(MultiLockGuard),
}

/// How long one acquisition may go on.
#[derive(Clone, Copy)]
enum Patience {
    /// The manager's few quick retries.
    Retries,
    /// Until this instant.
    Until(Instant),
}

/// One acquisition of what `args` asks for, with `patience`.
async fn attempt(
    locks: &Redlock,
    args: &ExecArgs,
    patience: Patience,
) -> Result<Acquired, LockError> {
    let (resource, ttl) = (args.resource.as_str(), args.ttl);
    let one = |guard: LockGuard| Acquired::One(guard);
    match (Mode::of(args), patience) {
        (Mode::Lock, Patience::Retries) => locks.lock(resource, ttl).await.map(one),
        (Mode::Lock, Patience::Until(at)) => locks.lock_until(resource, ttl, at).await.map(one),
        (Mode::Permit(k), Patience::Retries) => {
            locks.semaphore(resource, k).acquire(ttl).await.map(one)
        }
        (Mode::Permit(k), Patience::Until(at)) => {
            let semaphore = locks.semaphore(resource, k);
            semaphore.acquire_until(ttl, at).await.map(one)
        }
        (Mode::Shared(r), Patience::Retries) => {
            let rw = locks.rw_lock(resource).max_readers(r);
            rw.read(ttl).await.map(one)
        }
        (Mode::Shared(r), Patience::Until(at)) => {
            let rw = locks.rw_lock(resource).max_readers(r);
            rw.read_until(ttl, at).await.map(one)
        }
        (Mode::Exclusive(r), Patience::Retries) => {
            let rw = locks.rw_lock(resource).max_readers(r);
            rw.write(ttl).await.map(Acquired::All)
        }
        (Mode::Exclusive(r), Patience::Until(at)) => {
            let rw = locks.rw_lock(resource).max_readers(r);
            rw.write_until(ttl, at).await.map(Acquired::All)
        }
    }
}

/// Acquires as `--no-wait` / `--wait` / neither ask.
async fn acquire(locks: &Redlock, args: &ExecArgs) -> Result<Acquired, LockError> {
    if args.no_wait {
        // `lock`, not `try_lock`: its few quick retries at random delays break the tie when
        // several hosts start at the same moment and split the votes, which would otherwise
        // leave the job run by nobody.
        return attempt(locks, args, Patience::Retries).await;
    }
    if let Some(wait) = args.wait {
        let deadline = deadline_after(tokio::time::Instant::now(), wait);
        return attempt(locks, args, Patience::Until(deadline.into_std())).await;
    }
    loop {
        match attempt(locks, args, Patience::Until(Instant::now() + WAIT_SLICE)).await {
            Err(error) if error.is_retryable() => continue,
            done => return done,
        }
    }
}
