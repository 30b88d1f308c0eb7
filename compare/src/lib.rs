//! # quorumlock-compare: Redlock against the alternatives
//!
//! Lock clients for etcd, ZooKeeper and PostgreSQL behind one interface with quorumlock
//! ([`LockSubject`]), and the servers they need, started on this machine by the code itself
//! ([`server`]): the subjects that jepsen-lite and the bench judge side by side.
//!
//! | subject | recipe | a grant lasts | fencing token |
//! |---|---|---|---|
//! | [`RedlockSubject`] `redis-single`, `redlock-N` | quorumlock | its TTL (validity on the client's clock) | the quorum token, when fenced |
//! | [`EtcdLock`] `etcd` | mutex of etcd's `concurrency` package, client side | the client's lease (keep-alives every TTL/3) | the key's create revision |
//! | [`ZkLock`] `zookeeper` | Curator's `InterProcessMutex` | the client's session | the znode's creation zxid |
//! | [`PgAdvisoryLock`] `pg-advisory` | `pg_advisory_lock` | its session (optionally an idle timeout) | none |
//! | [`PgLeaseLock`] `pg-lease` | ShedLock-style lease row | its TTL, by the database's clock | a sequence drawn at the grant |
//!
//! etcd's server-side `Lock` RPC is not measured: the one in etcd 3.4 (Debian's) can grant a
//! lock twice (Jepsen); the client-side recipe is.
//!
//! The servers come from Debian's packages (`scripts/install-deps.sh --compare`): an
//! [`EtcdCluster`](server::EtcdCluster), a [`ZkEnsemble`](server::ZkEnsemble) and a
//! [`PgServer`](server::PgServer) (run as the `postgres` user when this process is root:
//! PostgreSQL refuses root).
//!
//! ## Layout
//!
//! * `subject.rs`: the interface and the grant; `error.rs`: its error.
//! * `etcd/`, `zookeeper/`, `postgres/`, `redlock.rs`: one subject each.
//! * `server/`: the server processes (start, pause, kill, restart, data loss, leader).
//! * `cleanup.rs`: the drop guard that removes what a dropped acquisition queued.
//! * `comparison/`: the comparison itself (cells, benchmark, page), run by the
//!   `quorumlock-compare` binary (`main.rs`).

mod cleanup;
pub mod comparison;
mod error;
mod etcd;
mod postgres;
mod redlock;
pub mod server;
mod subject;
mod zookeeper;

pub use error::SubjectError;
pub use etcd::{EtcdLock, EtcdOptions};
pub use postgres::{PgAdvisoryLock, PgAdvisoryOptions, PgLeaseLock, PgLeaseOptions};
pub use redlock::RedlockSubject;
pub use subject::{Held, LockSubject, MAX_RESOURCE_LEN};
pub use zookeeper::{ZkLock, ZkOptions};
