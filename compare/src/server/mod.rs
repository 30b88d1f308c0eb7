//! The servers of the comparison, started on this machine by the code itself: an etcd
//! cluster, a ZooKeeper ensemble, a PostgreSQL server. Each runs on free loopback ports (from
//! `QUORUMLOCK_TEST_PORTS` when it is set) with its data in a temporary directory, and is
//! killed by process group on drop. Each process can be paused (`SIGSTOP`), resumed, killed
//! (`SIGKILL`), stopped gracefully and restarted with its data; etcd and ZooKeeper members can
//! also restart without their data and tell which member leads.
//!
//! Everything is synchronous, built on `std::process` and `std::net`, like
//! `quorumlock_testkit`'s redis masters, so it serves tests, the harness and the bench alike.

mod error;
mod etcd;
mod ports;
mod postgres;
mod probe;
mod process;
mod zookeeper;

pub use error::ServerError;
pub use etcd::{EtcdCluster, EtcdMember};
pub use postgres::{conninfo, PgServer, PG_USER};
pub use process::ServerProcess;
pub use zookeeper::{connect_string, ZkEnsemble, ZkServer};
