//! Deterministic simulation of quorumlock: simulated Redis masters that run the library's real
//! Lua scripts on a clock the simulation controls (see the README for the plan).
//!
//! * [`master`]: one simulated master: its data, clock, scripts, clients and pub/sub, fed
//!   request bytes and answering reply bytes, as `redis-server` 7.0 does;
//! * [`script`]: the Lua 5.1 engine with Redis's `redis.*` API and value conversions;
//! * [`commands`]: the data commands; [`keyspace`]: strings and hashes with expiry;
//! * [`frame`], [`resp`]: replies and the wire protocol (RESP2 and RESP3);
//! * [`clock`]: a master's simulated wall clock; [`seed`]: everything random, from one seed;
//! * [`world`]: the real library against simulated masters on turmoil, faults, checkers;
//! * [`shrink`]: a smaller run that fails as a failing one did, for a trace short enough to read.

pub mod args;
pub mod clock;
pub mod commands;
pub mod frame;
pub mod keyspace;
pub mod master;
pub mod resp;
pub mod script;
pub mod seed;
pub mod shrink;
pub mod world;

pub use frame::{Frame, Protocol};
pub use master::{ClientId, SimMaster};
