//! The CLI's tests: the `quorumlock` binary run against real `redis-server` processes that each
//! test starts on free ports and stops. One binary (one link instead of one per file), one module
//! per command or concern.

#[path = "../support/mod.rs"]
mod support;

mod breaking;
mod clear;
mod diagnostics;
mod elect;
mod exec_exclusion;
mod exec_lost_lock;
mod exec_once;
mod exit_codes;
mod extreme_durations;
mod shared_and_permits;
mod status;
mod tls;
