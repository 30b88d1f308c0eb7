//! The integration tests of the library against real `redis-server` processes that each test
//! starts on free ports and stops: one binary (one link instead of one per file), one module
//! per concern. `metrics`, `tls` and `tracing_output` stay binaries of their own: each installs
//! something process-wide (a metrics recorder, `SSL_CERT_FILE`, a tracing subscriber).

#[path = "../support/mod.rs"]
mod support;

mod admin_cancellation;
mod auth;
mod backlog;
mod cancellation;
mod cancellation_sweep;
mod connections;
mod contention;
mod dead_masters;
mod election;
mod extend;
mod extreme_durations;
mod fencing;
mod garbage_master;
mod hold_at_least;
mod inspect;
mod invalid_input;
mod keys_and_ttls;
mod lease;
mod lock_all;
mod master_restart_with_data;
mod mutual_exclusion;
mod notified_handoff;
mod paused_master;
mod quiet_cleanup;
mod quorum_failure_rollback;
mod redaction;
mod reentrancy;
mod release_after_expiry;
mod release_after_reconnect;
mod reset_connection;
mod restart_protection;
mod restarted_master;
mod retries;
mod rw_intent_minority;
mod rw_lock;
mod rw_semaphore_breaking;
mod semaphore;
mod semaphore_rw_attacks;
mod slot_batches;
mod slot_cancellation;
mod slot_claims;
mod slot_late_claims;
mod slot_record_lifetime;
mod stats;
mod transport_breaking;
mod validity;
mod watch_cancellation;
mod wrong_type_key;
