//! The comparison's kernel faults and its orphans' check, each run as one cell of the smoke
//! (the real servers, the real workers): each must pass, show its proof, and leave no
//! iptables rule of this process behind.

use quorumlock_compare::comparison::{self, expectation, Cell, Fault, SubjectKind, Timing};

/// One cell at a time: the check that no rule is left reads the rules of the whole process.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs the cell of `subject` under `fault` as the smoke does; returns its row.
async fn cell(subject: SubjectKind, fault: Fault) -> comparison::CellRow {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (expect, because) = expectation(subject, fault).expect("the cell is in the catalog");
    let dir = tempfile::tempdir().expect("tempdir");
    let row = comparison::run(
        Cell {
            subject,
            fault,
            expect,
            because,
        },
        Timing::new(true),
        dir.path(),
    )
    .await;
    assert_no_rule_left();
    row
}

/// No rule whose comment names this process is left in the tables the faults use.
fn assert_no_rule_left() {
    let mine = format!("quorumlock-compare:{}:", std::process::id());
    for table in ["filter", "mangle"] {
        let out = std::process::Command::new("iptables")
            .args(["-w", "-t", table, "-S"])
            .output()
            .expect("iptables -S");
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(!listing.contains(&mine), "left in {table}:\n{listing}");
    }
}

fn proof(row: &comparison::CellRow) -> String {
    row.faults
        .iter()
        .map(|f| f.reading.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Packet loss on PostgreSQL's port drops packets (the rule's counter says so) and the lock
/// holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packet_loss_drops_packets_and_leaves_no_rule() {
    let row = cell(SubjectKind::PgAdvisory, Fault::PacketLoss).await;
    assert_eq!(row.verdict, "pass", "{row:?}");
    assert!(proof(&row).contains("packets dropped"), "{row:?}");
}

/// The ZooKeeper leader cut off from the others, both ways: another server leads, the cut
/// one stops serving, the lock holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_partition_cuts_the_zookeeper_leader_off_both_ways() {
    let row = cell(SubjectKind::Zookeeper, Fault::MemberPartition).await;
    assert_eq!(row.verdict, "pass", "{row:?}");
    assert!(proof(&row).contains("not currently serving"), "{row:?}");
}

/// A cancelled etcd waiter's key is deleted, a crashed holder's goes with its lease, both
/// within the bound, read on the members themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_etcd_go_within_their_bound() {
    let row = cell(SubjectKind::Etcd, Fault::Orphans).await;
    assert_eq!(row.verdict, "pass", "{row:?}");
    assert!(
        row.notes.iter().any(|n| n.contains("crashed holder's")),
        "{row:?}"
    );
}
