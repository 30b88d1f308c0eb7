//! `Redlock::inspect_lock` on real masters: what each master holds, read on the library's own
//! connections, and patient with a connection that is not open yet.

use crate::support;

use std::time::Duration;

use quorumlock::{CampaignOptions, Redlock};
use quorumlock_testkit::{Mode, Modes, Proxy};
use support::{builder, cluster, manager};

#[tokio::test]
async fn every_master_says_what_it_holds() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let free = locks.inspect_lock("chair").await.expect("inspect");
    assert_eq!(free.len(), 3);
    assert!(
        free.iter().all(|i| i.seen().is_ok_and(|s| !s.held)),
        "{free:?}"
    );
    let leader = locks
        .election("chair")
        .campaign("host-a", CampaignOptions::new())
        .await
        .expect("elected");
    let held = locks.inspect_lock("chair").await.expect("inspect");
    let holding: Vec<_> = held
        .iter()
        .filter_map(|i| i.seen().ok())
        .filter(|s| s.held)
        .collect();
    assert!(
        holding.len() >= 2,
        "held on {} of 3: {held:?}",
        holding.len()
    );
    for state in holding {
        assert_eq!(state.identity.as_deref(), Some("host-a"), "{state:?}");
        assert!(
            state
                .remaining
                .is_some_and(|r| r <= Duration::from_secs(30)),
            "{state:?}"
        );
    }
    leader.resign().await.expect("resign");
}

/// A master whose link holds every byte for longer than a node timeout, then lets them through:
/// the inspection waits for it (within the connect timeout) rather than failing at the first
/// request of a cold connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_slow_connection_is_waited_for() {
    let cluster = cluster(1);
    let proxy = std::sync::Arc::new(Proxy::start(1, &cluster.ports()).await.expect("proxy"));
    let hold = Modes {
        to_node: Mode::Hold,
        to_client: Mode::Pass,
    };
    proxy.set(0, 0, hold);
    let locks: Redlock = builder(&proxy.urls(0))
        .node_timeout(Duration::from_millis(50))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("build");
    let release = tokio::spawn({
        let proxy = std::sync::Arc::clone(&proxy);
        async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            proxy.heal_all();
        }
    });
    let seen = locks.inspect_lock("cold").await.expect("inspect");
    release.await.expect("release");
    assert!(seen[0].seen().is_ok(), "{seen:?}");
}
