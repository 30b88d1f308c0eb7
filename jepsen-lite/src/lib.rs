//! jepsen-lite: fault injection against quorumlock on real `redis-server` processes.
//!
//! The pieces, one per module: the host [`clock`], the [`history`] format, the protected
//! [`resource`], the [`checker`]s.

pub mod checker;
pub mod clock;
pub mod history;
pub mod proxy;
pub mod resource;
