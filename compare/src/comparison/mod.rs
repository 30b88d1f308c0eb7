//! The comparison: every subject under every fault, judged by jepsen-lite's checkers, and the
//! same benchmark for each; `compare.json` and one page (`quorumlock-compare run|bench|page`,
//! `scripts/jepsen.sh compare`).
//!
//! * `subjects.rs`: the subjects by label; `servers.rs`: their servers behind one interface
//!   for the faults; `testbed.rs`: the servers, the proxy and a client per proxy row;
//!   `peers.rs`: the cut between etcd or ZooKeeper members; `rules.rs`: the iptables rules
//!   of the kernel's faults, removed by a guard.
//! * `cells.rs`: the faults and each cell's expectation; `cell.rs`: one cell's run and
//!   verdict; `workload.rs`: its workers (and the holder's faults); `nemesis.rs`: the faults
//!   on the servers, each with its proof; `loss.rs`: packet loss; `clock.rs`: clock bumps
//!   under the clock shim, and `rendezvous.rs`: the holder they fall on; `orphans.rs`: what a
//!   cancelled acquisition and a crashed holder leave on the servers; `lost_data.rs`: the
//!   proof of a data loss; `stray.rs`: overlapping grants a holder's fault does not explain.
//! * `bench.rs`: the benchmark; `results.rs`: the file; `page.rs`, `charts.rs`: the page;
//!   `table.rs`: the terminal's tables.

mod bench;
mod cell;
mod cells;
mod charts;
mod clock;
mod loss;
mod lost_data;
mod nemesis;
mod orphans;
mod page;
mod peers;
mod rendezvous;
mod results;
mod rules;
mod servers;
mod stray;
mod subjects;
mod table;
mod testbed;
mod workload;

pub use bench::{bench, Sizes};
pub use cell::{run, Timing};
pub use cells::{catalog, expectation, Cell, Fault};
pub use page::{html, NOT_DONE};
pub use peers::{Cut, PeerLinks};
pub use results::{default_dir, BenchRow, CellRow, FaultProof, Figures, Provenance, Results};
pub use servers::Servers;
pub use subjects::SubjectKind;
pub use table::{bench_table, cell_table};
pub use testbed::{Links, Testbed};
