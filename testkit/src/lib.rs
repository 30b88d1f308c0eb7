//! Real `redis-server` masters for quorumlock's tests, examples, benchmark and the jepsen-lite
//! harness, and a [`Proxy`] that injects network faults between a client and a master.
//!
//! A [`RedisMaster`] is one `redis-server` process on `127.0.0.1` and a free port, with its own
//! temporary data directory. It can be killed (`SIGKILL`, a crash), stopped (`SIGTERM`),
//! paused and resumed (`SIGSTOP`/`SIGCONT`, a GC pause), restarted on the same port with its
//! data (as far as its [`Persistence`] kept it) or without it, or restored from a [`Backup`] of
//! its files taken earlier (then its data is older than what it acknowledged). A
//! [`RedisCluster`] is `n` independent masters, as Redlock needs. Everything is synchronous,
//! built on `std::process` and `std::net`, so it works from plain `#[test]`s, async tests and
//! harness binaries alike.
//!
//! Servers start on free ports in parallel (a five-master cluster is up in a few tens of
//! milliseconds), and a server that lost a race for its port is started again on another one.
//! Every process is killed and reaped when its `RedisMaster` is dropped, also when a test
//! panics, and its directory is removed.
//!
//! The binary is `$QUORUMLOCK_REDIS_SERVER` if set, else `redis-server` on `$PATH`, else
//! `/usr/bin/redis-server`; on Debian, `apt-get install -y redis-server` provides it.
//!
//! # Examples
//!
//! ```no_run
//! use quorumlock_testkit::RedisCluster;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cluster = RedisCluster::start(3)?;
//! // `redis://127.0.0.1:PORT` for each master, for `quorumlock::Redlock::builder().nodes(..)`.
//! let urls = cluster.urls();
//!
//! // A long GC pause on one master: the other two still make a quorum.
//! cluster[0].pause()?;
//! // ... lock with `redlock`, expect a grant ...
//! cluster[0].resume()?;
//!
//! // Data the masters hold can be inspected directly.
//! assert_eq!(cluster[1].command(&["DBSIZE"])?, "0");
//! # drop(urls);
//! # Ok(())
//! # }
//! ```

mod backup;
mod cluster;
mod error;
mod master;
mod options;
mod port;
mod process;
pub mod proxy;
mod resp;
mod startup;

pub use backup::Backup;
pub use cluster::RedisCluster;
pub use error::TestingError;
pub use master::RedisMaster;
pub use options::{MasterOptions, Persistence};
pub use port::{free_port, listener_port, PORTS_VAR};
pub use proxy::{Mode, Modes, Proxy};
pub use resp::{query_port, Reply};

#[cfg(test)]
mod tests;
