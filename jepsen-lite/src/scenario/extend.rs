//! The extension scenario: A's keys vanish on three of five masters while it holds, and its
//! extension must be refused.

use super::{base, mutant, Expect, Scenario, Script};
use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::Verb;
use serde_json::json;

/// This family's scenarios, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    let extend = Scenario {
        about: "A holds all five; its keys vanish on 3 nodes; A's extend must be refused",
        ttl_ms: 4000,
        ..base(
            "extend-after-expiry",
            "extend",
            Expect::Hold,
            Script::ExtendAfterExpiry,
        )
    };
    let recreates = mutant(&extend, "mutant-extend-recreates", "extend-recreates");
    vec![extend, recreates]
}

/// A holds all five; its keys are deleted on three; A extends. An extension that succeeds is
/// not in the history's terms, so it goes to `notes`.
pub(super) async fn play(env: &mut Env, notes: &mut Vec<String>) -> Result<(), Error> {
    env.phase("A acquires all five");
    env.cycle(
        0,
        CycleSpec {
            wait_go: true,
            extend: true,
            ..env.spec("r")
        },
    )
    .await?;
    env.wait(0, "read").await?;
    let key = "quorumlock:r";
    for n in 0..3 {
        tokio::task::block_in_place(|| env.masters[n].command(&["DEL", key]))?;
    }
    env.nemesis
        .record(Verb::ExpireKeys, json!({"nodes": [0, 1, 2], "key": key}));
    env.phase("A extends");
    env.clients[0].send(&Command::Go).await?;
    let extended = env.wait(0, "extended").await?;
    if extended.ok {
        notes.push(
            "an extension succeeded although the lock's keys were gone on 3 of 5 nodes".into(),
        );
    }
    env.wait(0, "done").await?;
    Ok(())
}
