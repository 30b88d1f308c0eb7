//! jepsen-lite: fault injection against quorumlock on real `redis-server` processes.
//!
//! Laid out along Jepsen's lines: the run's environment ([`env`](mod@env): the masters of
//! [`cluster`], the library's fault proxy, the protected [`resource`], the lock [`client`]
//! processes), the [`nemesis`] (each fault a typed operation with its took-effect check, recorded
//! in the [`evidence`]), the [`scenario`]s (each scripted one beside its play), the
//! [`generator`] of random and composed schedules and their [`random`] play, the [`checker`]s
//! over the [`history`], the pure [`verdict`], and the [`report`]. A [`run`] ties one scenario
//! together; [`soak`] runs random composed runs back to back. The host [`clock`] and the
//! wall-clock shim ([`clockshim`]) are beside them.

pub mod checker;
pub mod client;
pub mod clock;
pub mod clockshim;
pub mod cluster;
pub mod cron;
pub mod env;
pub mod evidence;
pub mod fenced_store;
pub mod generator;
pub mod history;
pub mod json_lines;
pub mod key_sampler;
pub mod leaks;
pub mod nemesis;
pub mod outcome;
pub mod process_env;
pub mod random;
pub mod report;
pub mod resource;
pub mod run;
pub mod scenario;
pub mod soak;
pub mod verdict;
pub mod workload;
