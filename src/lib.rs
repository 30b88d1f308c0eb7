//! # quorumlock: Redlock for tokio
//!
//! A distributed lock held by a majority of N independent Redis masters (no replication between
//! them), following the Redlock algorithm, with the details that decide whether it is safe done
//! right:
//!
//! * `SET key value NX PX ttl` goes to **all masters at once**, each request bounded by a
//!   per-node timeout, and the round is **decided as soon as the outcome is known**: at the
//!   quorum-th grant, or as soon as a quorum has become impossible. A slow, paused or dead
//!   minority costs nothing.
//! * Validity is `ttl − elapsed − (ttl × drift_factor + 2 ms)`, on a monotonic clock started
//!   before the first request. A lock is granted only with a quorum **and** validity left. On
//!   Linux the clock also counts time the machine spent suspended (`CLOCK_BOOTTIME`), which
//!   `Instant` does not, while the keys keep expiring: a round or a hold that spans a suspend
//!   loses that much validity.
//! * On failure, and when a `lock()` future is dropped mid-flight, every key the round may have
//!   set is released with a compare-and-delete — **including** on masters that timed out: the
//!   release travels on the same connection behind the late `SET`, so the master runs it after.
//!   Cleanups are always sent, even when their caller stopped waiting. A connection that broke
//!   is closed on the master (`CLIENT KILL`) before its replacement carries anything, so a late
//!   `SET` still in the old connection's path cannot run after the release sent on the new one.
//!   Where the master refuses `CLIENT INFO`/`CLIENT KILL` (an ACL, a renamed command, Redis
//!   before 6.2, a proxy in between), such a `SET` can outlive its release, and the key then
//!   lives **at most one TTL**. So does a key whose release could not be delivered at all (its
//!   master unreachable until then).
//! * Lock values are a v4 UUID (122 random bits from the OS CSPRNG), fresh for every attempt.
//! * Release and extend are atomic Lua scripts (compare-and-delete, compare-and-`PEXPIRE`);
//!   an extension counts only if a quorum confirms it within the current validity.
//! * One typed [`LockError`] tells contention, unreachable masters, exhausted validity, a lock
//!   no longer held and a passed deadline apart.
//!
//! ## Quick start
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let locks = quorumlock::Redlock::builder()
//!     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
//!     .build()?; // no master needs to be up yet
//!
//! let mut guard = locks.lock("job:42", Duration::from_secs(10)).await?;
//! assert!(guard.is_valid());
//! // ... do work that finishes well within guard.remaining() ...
//! guard.extend(Duration::from_secs(10)).await?; // need more time
//! guard.release().await?;
//!
//! // Wait at most two seconds for a contended lock:
//! let wait = Instant::now() + Duration::from_secs(2);
//! match locks.lock_until("job:42", Duration::from_secs(10), wait).await {
//!     Ok(guard) => guard.release().await?,
//!     Err(e) if e.is_contended() => println!("someone else is running job 42"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## What is guaranteed
//!
//! While [`LockGuard::is_valid`] holds, no other client can have been granted the same
//! resource by a quorum, provided Redlock's assumptions hold:
//!
//! * the masters are independent, and a master that loses its data does not rejoin while locks
//!   it granted may still be valid (see below);
//! * clocks of masters and clients run at about the same rate (the drift allowance covers
//!   `drift_factor` of the TTL); no clock **jumps**;
//! * the holder finishes its work before the validity ends.
//!
//! ## What Redlock does not promise
//!
//! * **Pauses after the check.** A holder that pauses (GC, `SIGSTOP`, page faults, swapping) or
//!   whose packets are delayed **after** it checked the validity can act after the lock moved
//!   on. No lease lock can prevent this; only a **fencing token** checked by the protected
//!   resource (reject any write older than the newest seen) makes the stale write harmless.
//! * **Wall-clock jumps on a master.** Redis expires keys by the wall clock. A clock that jumps
//!   forward on a master frees the lock there early, and two clients can then both gather a
//!   quorum. Run masters with slewing time synchronisation, never stepping.
//! * **Masters that restart and forget locks.** A master that crashes and comes back empty, or
//!   with data older than its last grants (an RDB snapshot, Redis's default persistence; an
//!   AOF whose unsynced tail a power loss took; a restored backup), can grant the lock again
//!   while the old holder still counts on it. `appendfsync always` survives crashes but not a
//!   restore from a backup; keep a restarted master out of service for longer than the maximum
//!   TTL in use ("delayed restarts", which restart protection below enforces from the client,
//!   whatever the persistence). `SIGKILL` with `appendfsync everysec` usually keeps the data
//!   (it is in the page cache); a power loss does not.
//!
//! When correctness depends on the lock (not just efficiency), use fencing tokens, or a
//! consensus system (etcd, ZooKeeper) whose leases carry them. When the lock only avoids
//! duplicate work, a single Redis master (`N = 1`, the same API) is simpler and faster.
//!
//! ## Beyond the plain algorithm (all opt-in)
//!
//! * **Fencing tokens** ([`Redlock::fenced`]): every
//!   grant carries a `u64` ([`LockGuard::fence`]) strictly greater than the token of every earlier
//!   grant of the resource whose lease has ended, as long as a majority of masters keeps its data.
//!   Each master keeps a counter per resource, bumped atomically with the `SET NX` and floored by
//!   the master's clock in microseconds and by a token the client proposes (its wall clock plus
//!   half a second, capped at the master's clock plus one second). The token is the maximum over
//!   the granting quorum; it must be stored on a quorum, so that any later quorum (which shares a
//!   master with this one) starts above it. When a quorum issued that very token (clocks within
//!   half a second), it already is, and the grant takes the one round; otherwise the client writes
//!   it back to a quorum first, one more round trip. If counters are lost (a restart without data,
//!   an expired counter), tokens stay monotonic as long as master clocks never step backwards and
//!   two grants are further apart than the masters' clock disagreement plus one second (a token may
//!   lead its master's clock by up to the proposal cap). The protected resource must reject any
//!   token lower than the highest it has seen.
//! * **Restart protection** ([`RedlockBuilder::restart_protection`] with
//!   [`RedlockBuilder::max_ttl`]): client-enforced *delayed restarts*. A master's vote does not
//!   count until the maximum TTL (plus drift) has passed since it last **restarted**, whatever
//!   data it reloaded: every connection reads the master's `run_id` and uptime when it opens (a
//!   restart breaks every connection), so there is no extra round trip per lock. Each master
//!   also carries an epoch marker, created by the acquire script (stamped with the master's
//!   clock) when it is missing, which catches data lost without a restart (`FLUSHALL`,
//!   eviction). Every restart nobody vouched for is quarantined, whatever the persistence: a
//!   master with `appendfsync always` restored from a backup reloads an old epoch marker and
//!   looks exactly like one that merely restarted. The cost is availability: a restarted
//!   master sits out one max TTL, and so does a brand-new deployment until
//!   [`Redlock::provision`] vouches for its masters' current processes
//!   ([`Redlock::master_uptimes`] tells which masters started recently).
//!   [`RedlockBuilder::trust_durable_restarts`] lets durable masters count at once after a
//!   restart, and then a restore from a backup breaks mutual exclusion unless the operator
//!   keeps the restored master out for one max TTL (its docs say how). A master's uptime is
//!   read from its wall clock: a clock stepped forward on a master shortens its quarantine, as
//!   it shortens its keys' TTLs.
//! * **Reentrancy** ([`Redlock::reentrant`] with an [`Owner`]): the same owner may acquire
//!   again; only its last release frees the lock. With fencing, a re-entry keeps the token of
//!   the grant it re-enters: every acquisition of the owner while one of its guards of the
//!   resource is still valid carries the token of the first, so a fenced resource never rejects
//!   the outer guard's writes after an inner one's. The masters' counters cannot tell that token
//!   apart from others, so the handles derived from one manager keep it in the process (an
//!   [`Owner`] lives in one); the next hold, once every guard was released or ran out, gets a
//!   higher token.
//!
//! ## Several resources at once
//!
//! [`Redlock::set`] (a [`LockSet`], with [`try_lock`](LockSet::try_lock), [`lock`](LockSet::lock),
//! [`lock_until`](LockSet::lock_until)) locks a set of resources all or nothing: each master sets
//! every key of the set in one script or none, and a quorum of masters that granted the whole set
//! grants it. No master ever holds part of a set, so callers naming the same resources in any order
//! cannot deadlock. One [`MultiLockGuard`] extends and releases the set together; its one fencing
//! token is written to every resource's counter, so each resource's store checks it like a token of
//! its own.
//!
//! ## Leader election
//!
//! [`Election::campaign`] waits until elected and returns a [`Leadership`]: a lease on the
//! election's lock (renewed, [`lost`](Leadership::lost), fencing token, `max_hold`) carrying
//! the leader's identity. [`Election::observe`] streams leadership changes ([`Leader`]: identity
//! and token, or `None`), and [`Leadership::resign`] hands over at once. The identity is stored
//! in the lock value after its 32 random hex digits and a `:` ([`holder_identity`] reads it):
//! the value stays unguessable, and release and extend still compare all of it. The token is
//! announced beside the lock once a quorum granted it. Waiting campaigners and observers are
//! woken by notifications, with polling every [`defaults::POLL_EVERY`] as the fallback.
//!
//! ## Runtime
//!
//! quorumlock runs on tokio (its pipelined connections and the timeouts need
//! a runtime with IO and time enabled). Called outside a runtime, operations fail with
//! [`NodeErrorKind::NoRuntime`] on every master instead of panicking.
//!
//! ## Choosing settings
//!
//! * **TTL**: longer than the work plus a margin; extend for long work. The validity you get is
//!   a little shorter (elapsed time and drift).
//! * **Node timeout** ([`RedlockBuilder::node_timeout`], 50 ms): small against the TTL (the spec
//!   suggests 5–50 ms for 10 s); it bounds how long a dead or paused master can delay a round
//!   that needs it.
//! * **Drift factor** ([`RedlockBuilder::drift_factor`], 0.01): the fraction of the TTL set aside
//!   for clock-rate differences.
//! * **Retries** ([`RedlockBuilder::retry_count`] = 3, [`RedlockBuilder::retry_delay`] = 200 ms
//!   upper bound of a uniform random delay): the randomness keeps competing clients apart.
//!
//! ## Long work: auto-extension
//!
//! For work that may outlast any TTL worth picking, let a [`Lease`] renew the lock in the
//! background. [`Redlock::run_exclusive`] acquires, runs the work, cancels it if the lock is
//! lost (a renewal found it gone from a majority, or none succeeded before the validity ran out)
//! and releases; [`LockGuard::keep_alive`] renews a guard you manage. The holder learns of a
//! loss at once through [`Lease::lost`] (or polls [`Lease::is_held`]), and
//! [`LeaseOptions::max_hold`] caps the total hold time so a stuck holder cannot keep a resource
//! forever. A lease ends a [`LeaseOptions::safety_margin`] (a twentieth of the TTL, at most
//! 50 ms, by default) before the lock's validity does, so that work cancelled on the loss stops
//! while the lock is still valid, despite timer rounding and scheduling delays. A lease narrows
//! the window in which a lost lock goes unnoticed; only fencing tokens close it.
//!
//! ## Observability
//!
//! Acquire, extend and release run in `tracing` spans (`acquire`, `extend`, `release`) that
//! carry the resource, the retry count, the outcome and the validity left; inside them, every
//! request to a master emits an event with the node (password redacted) and its latency, and
//! the round's decision an event with its vote counts. Lock values and passwords never appear.
//! For users without a tracing or metrics stack, [`Redlock::stats`] returns cheap in-process
//! counters ([`Stats`]).
//!
//! With the `metrics` cargo feature the same figures go to the [`metrics`](https://docs.rs/metrics)
//! facade, for any recorder (Prometheus, StatsD, ...): counters `quorumlock_grants_total`,
//! `quorumlock_contended_total`, `quorumlock_unreachable_total`,
//! `quorumlock_validity_exhausted_total`, `quorumlock_extensions_total`,
//! `quorumlock_extension_failures_total`, `quorumlock_releases_total`, `quorumlock_lost_total`
//! and `quorumlock_node_errors_total{node}`; histograms `quorumlock_acquire_wait_seconds` (call
//! to grant, retries included) and `quorumlock_node_latency_seconds{node}` (every answered or
//! failed request; requests abandoned once a round is decided are not timed).
//!
//! ## Cancellation and drop
//!
//! Every async method documents its cancel safety. Dropping a [`LockGuard`] releases the lock
//! in the background; dropping an acquisition future releases whatever it may have set.
//!
//! ## Layout
//!
//! For contributors: one concept per file or folder, and no module imports one that imports it
//! back. From the entry points down:
//!
//! * `config`: [`RedlockBuilder`], validated into the settings (no I/O); `defaults` and
//!   `limits` (public): every default value and every bound, in one place each;
//! * `manager`: [`Redlock`], the single-key entry points (`try_lock`, `lock`, `lock_until`,
//!   `provision`, ...) and the handles' constructors; `shared`: what a manager and its guards
//!   share;
//! * `acquisition`: the one acquisition driver every entry point runs its rounds through
//!   (retries or a deadline, the waiter line of notified hand-offs, the random delay, the wait
//!   for a failed round's cleanup, the `acquire` span and its counters);
//! * `guard` (folder): [`LockGuard`]; `state` (what every guard shares, one resource or a set:
//!   validity, extend, release, loss counting, release on drop, the fencing write-back),
//!   `min_hold` (a release that keeps the lock until a minimum time after the grant); `lease`
//!   (folder): auto-extension, [`Lease`] and [`Redlock::run_exclusive`] (`exclusive`, `handle`,
//!   `min_hold`, `options`, `task`);
//! * `multi` (folder): [`LockSet`] ([`Redlock::set`]): the key set and the master that presents
//!   it to the round as one key (`keyset`), [`MultiLockGuard`] (`guard`); `election` (folder):
//!   [`Election`] ([`Redlock::election`]): campaign and announcement, [`Leadership`]
//!   (`leadership`, a lease over a one-key set), observers (`observe`);
//! * `slot` (folder, public for its docs): [`Slots`] ([`Redlock::slots`], `slots`): options,
//!   outcomes, the quorum round of a batch of claims (`round`, one slot being a batch of one),
//!   the retries of one claim (`slot.rs`) and of many (`many`), [`SlotRun`] (`run`), the undo of
//!   an unreturned claim (`undo`) and batched completions (`complete`);
//! * `wake` (folder): notified hand-offs: a manager's line of waiters (`line`) and the
//!   subscription to the masters' release announcements (`subscriber`);
//! * `round` (folder): the one quorum engine every claim runs on (`engine`: fan-out, early
//!   decision, validity, quarantine, undo of failed, cancelled and late requests), the single-key
//!   and key-set round in `round.rs`, the interface to a master (`master`), a round's terms
//!   (`terms`), the votes (`tally`), the timing maths (`timing`), and, for tests only, fake masters
//!   on a virtual clock (`fake`) and the safety properties over them (`properties`,
//!   `slot_properties`);
//! * `transport` (folder): one real master: the node (with its key-set, script and slot requests
//!   in `node/`), its pooled connections (`pooled`), the open connection, the orphan cleanup of a
//!   replaced connection, the pipeline, RESP and the strict reading of replies, node URLs;
//! * `scripts` (folder): one file per Lua script family, each with its keys, arguments and reply
//!   (acquire, release, extend, fence, hold, multi, restart, slot claim / finish / status / keys,
//!   mutants);
//! * `fencing`: the token rule, its constants and the write-back; `keys`: every key written on a
//!   master, named once; `restart_protection`: which life of a master a connection talks to;
//!   `reentrant_hold`: the fencing token a reentrant owner's hold keeps; `clock`: the lock clock,
//!   which counts a suspended machine;
//! * `error`, `stats`, `traced`, `owner`, `value`, `mutant`: the typed errors, counters,
//!   tracing spans, reentrant owners, lock values and the jepsen-lite mutants.
//!
//! The real `redis-server` masters of the tests, examples, benchmark and jepsen-lite, and the
//! fault proxy that cuts, holds and delays their traffic, are the workspace crate
//! `quorumlock-testkit` (`testkit/`), not part of this library.
#![forbid(unsafe_code)]

mod acquisition;
mod admin;
mod clock;
mod config;
pub mod defaults;
mod election;
mod error;
mod fencing;
#[cfg(feature = "sim")]
mod footprint;
mod guard;
mod inspect;
mod keys;
mod lease;
pub mod limits;
mod manager;
mod multi;
mod mutant;
mod outside;
mod owner;
mod reentrant_hold;
mod restart_protection;
mod round;
mod rwlock;
mod scripts;
mod semaphore;
mod shared;
pub mod slot;
mod stats;
mod traced;
mod transport;
mod value;
mod wake;

#[cfg(feature = "sim")]
#[doc(hidden)]
pub use scripts::catalog::lua_scripts;

#[cfg(feature = "sim")]
#[doc(hidden)]
pub use footprint::{footprint, Footprint};

#[cfg(feature = "sim")]
#[doc(hidden)]
pub use outside::sim;

/// The README's Rust examples, compiled as doctests so that they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The Rust examples of the pages under `docs/`, compiled as doctests like the README's.
#[cfg(doctest)]
#[doc = include_str!("../docs/fencing.md")]
#[doc = include_str!("../docs/restart-protection.md")]
#[doc = include_str!("../docs/semaphores-and-rw-locks.md")]
struct DocsDoctests;

pub use admin::Cleared;
pub use config::RedlockBuilder;
pub use election::{holder_identity, CampaignOptions, Election, Leader, Leadership, Observer};
pub use error::{ConfigError, InvalidArgument, LockError, NodeError, NodeErrorKind, NotHeldReason};
pub use guard::LockGuard;
pub use inspect::{EpochMarker, Inspection, KeyState};
pub use lease::{KeepAliveError, Lease, LeaseHandle, LeaseOptions, LeaseStats};
pub use manager::Redlock;
pub use multi::{LockSet, MultiLockGuard};
#[cfg(quorumlock_mutants)]
#[doc(hidden)]
pub use mutant::Mutant;
pub use owner::Owner;
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use slot::{SlotClaim, SlotOptions, SlotRecord, SlotRun, SlotStatus, Slots};
pub use stats::{NodeStats, Stats};
