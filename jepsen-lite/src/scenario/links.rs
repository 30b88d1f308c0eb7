//! Scenarios scripted on the proxy's links: a split into two minorities, and replies held
//! past the TTL.

use std::time::Duration;

use quorumlock_testkit::Modes;
use serde_json::json;

use super::play::{cut, sleep};
use super::{base, mutant, Expect::Hold, Scenario, Script};
use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::{Fault, Verb};

/// This family's scenarios, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    let split = Scenario {
        about: "A reaches only {0,1}, B only {2,3,4}",
        ..base("split-minority", "partition", Hold, Script::SplitMinority)
    };
    let held = Scenario {
        about: "A's replies held for TTL+500ms (node timeout 3 s): late quorum leaves no validity",
        node_timeout_ms: 3000,
        retry_delay_ms: 5,
        ..base("held-replies", "delay", Hold, Script::HeldReplies)
    };
    let mutants = [
        mutant(&held, "mutant-no-elapsed-check", "no-elapsed-check"),
        mutant(&held, "mutant-grant-exhausted", "grant-exhausted"),
        mutant(&split, "mutant-minority-quorum", "minority-quorum"),
    ];
    let mut v = vec![split, held];
    v.extend(mutants);
    v
}

/// A reaches only {0,1}, B only {2,3,4}; both try at once: neither may hold on a minority.
pub(super) async fn split_minority(env: &mut Env) -> Result<(), Error> {
    cut(env, 0, &[2, 3, 4])?;
    cut(env, 1, &[0, 1])?;
    env.phase("A and B acquire at once");
    let spec = CycleSpec {
        wait_go: true,
        ..env.spec("r")
    };
    // B tries for longer than a TTL: a round of its own that failed on a loaded box (a node
    // timeout on one of its three masters) can leave a key there for up to a TTL (its SET
    // landing after the undo), refusing B's next rounds meanwhile.
    let b = CycleSpec {
        acquire_deadline_ms: env.sc.ttl_ms + 1000,
        ..spec.clone()
    };
    env.cycle(0, spec).await?;
    env.cycle(1, b).await?;
    // Whoever acquired holds on (waits for go) while the other finishes.
    let mut holding = Vec::new();
    for c in [0, 1] {
        if env.wait(c, "acquired").await?.ok {
            env.wait(c, "read").await?;
            holding.push(c);
        } else {
            env.wait(c, "done").await?;
        }
    }
    sleep(Duration::from_millis(200)).await;
    for c in holding.into_iter().rev() {
        env.clients[c].send(&Command::Go).await?;
        env.wait(c, "done").await?;
    }
    Ok(())
}

/// A's replies are held longer than the TTL (long node timeout); B polls afterwards: A's late
/// quorum must leave it no validity.
pub(super) async fn held_replies(env: &mut Env) -> Result<(), Error> {
    let nodes = (0..env.masters.len()).collect();
    env.inject(&Fault::HoldReplies {
        clients: vec![0],
        nodes,
    })?;
    env.phase("A's replies are held");
    env.cycle(
        0,
        CycleSpec {
            acquire_deadline_ms: 1,
            release: false,
            min_remaining_ms: None,
            ..env.spec("r")
        },
    )
    .await?;
    env.wait(0, "acquiring").await?;
    sleep(env.ttl() + Duration::from_millis(500)).await;
    for n in 0..env.masters.len() {
        env.proxy.set(0, n, Modes::PASS);
    }
    env.nemesis.record(Verb::Release, json!({"client": 0}));
    env.phase("B polls");
    env.cycle(
        1,
        CycleSpec {
            acquire_deadline_ms: env.sc.ttl_ms,
            ..env.spec("r")
        },
    )
    .await?;
    env.wait(0, "done").await?;
    env.wait(1, "done").await?;
    Ok(())
}
