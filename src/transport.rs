//! One master over the network: the node (per-request timeout, the bound on what piles up
//! behind a master that stopped answering, the lock operations on its keys), its connections
//! and how they are opened, replaced and cleaned up after, the pipelined RESP connection, and
//! the strict reading of what a master answers.
//!
//! * [`node`]: [`RedisNode`](node::RedisNode), the real [`Master`](crate::round::master::Master);
//! * [`pooled`]: one pooled connection: opened lazily, kept across timeouts, replaced when broken;
//! * [`dial`]: opening a stream (TCP, Unix socket, TLS) and setting it up (`AUTH`, `SELECT`);
//! * `tls`: TLS for `rediss://` masters (feature `tls`);
//! * [`orphan`]: a replaced connection is closed on the master side first, so nothing it
//!   buffered runs after a cleanup;
//! * [`pipeline`]: quorumlock's own pipelined connection (requests batched, replies in order),
//!   the one connection every request goes on, TLS or not;
//! * [`pubsub`]: the pub/sub connection of notified hand-offs, on a dialled stream too;
//! * [`resp`]: the RESP2 encoder and strict incremental parser;
//! * [`reply`]: what each reply must look like, as typed errors;
//! * [`endpoint`]: what a node URL says (place, TLS, credentials, database);
//! * [`address`]: node URLs, duplicates, redaction of passwords.

pub(crate) mod address;
pub(crate) mod dial;
pub(crate) mod endpoint;
pub(crate) mod node;
pub(crate) mod orphan;
pub(crate) mod pipeline;
pub(crate) mod pooled;
pub(crate) mod pubsub;
pub(crate) mod reply;
pub(crate) mod resp;
#[cfg(feature = "tls")]
pub(crate) mod tls;
