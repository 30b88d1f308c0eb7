//! jepsen-lite: the fault-injection harness for quorumlock.
//!
//! This is a skeleton: the cluster, fault proxy, nemesis, workload, history and checkers arrive
//! with the jepsen-lite issue. It already links against the library and its test kit so the
//! workspace layout is fixed.

fn main() {
    eprintln!(
        "jepsen-lite {}: no scenarios yet",
        env!("CARGO_PKG_VERSION")
    );
    std::process::exit(2);
}
