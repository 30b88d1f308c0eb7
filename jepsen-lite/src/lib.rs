//! jepsen-lite: fault injection against quorumlock on real `redis-server` processes.
//!
//! One module per concept: the host [`clock`], the [`history`] format, the protected
//! [`resource`], the [`checker`]s, the fault [`proxy`], the wall-clock shim ([`clockshim`]),
//! the lock [`client`] process, the [`scenario`] catalog, a [`run`] of one scenario, and the
//! [`report`].

pub mod checker;
pub mod client;
pub mod clock;
pub mod clockshim;
pub mod evidence;
pub mod history;
pub mod outcome;
pub mod proxy;
pub mod report;
pub mod resource;
pub mod run;
pub mod scenario;
pub mod verdict;
