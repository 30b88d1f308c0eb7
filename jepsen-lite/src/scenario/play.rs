//! The play of a scripted scenario: its family's script drives the clients step by step
//! through the proxy and the nemesis, so that the fault lands exactly where the scenario needs
//! it (between A's grant and B's attempt, after A's last check, ...); then every fault is
//! healed and a liveness probe runs.

use std::time::Duration;

use quorumlock_testkit::Mode;

use super::{client, clock, crash, extend, links, Script};
use crate::client::CycleSpec;
use crate::env::{Env, Error};
use crate::nemesis::Fault;

/// Plays a scripted scenario (not a random one), ending with a heal and a liveness probe;
/// findings that are not in the history (an extension that should have been refused) go to
/// `notes`.
///
/// # Errors
///
/// When a step cannot be carried out or a client does not answer in time.
pub async fn play(env: &mut Env, notes: &mut Vec<String>) -> Result<(), Error> {
    match env.sc.script {
        Script::Random(_) | Script::Composed => {
            return Err("a random scenario has no script".into());
        }
        Script::ClientPause => client::pause(env).await?,
        Script::SlowCs => client::slow_cs(env).await?,
        Script::LateRelease => client::late_release(env).await?,
        Script::Crash(restart) => crash::play(env, restart).await?,
        Script::ClockJump(offset_ms) => clock::jump(env, offset_ms).await?,
        Script::ClockRate(ppm) => clock::rate(env, ppm).await?,
        Script::SplitMinority => links::split_minority(env).await?,
        Script::HeldReplies => links::held_replies(env).await?,
        Script::ExtendAfterExpiry => extend::play(env, notes).await?,
    }
    env.heal()?;
    env.phase("liveness probe");
    let probe = CycleSpec {
        acquire_deadline_ms: env.sc.ttl_ms + 2000,
        ..env.spec("r")
    };
    env.cycle(0, probe).await?;
    env.wait(0, "done").await?;
    Ok(())
}

pub(super) async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Cuts client `client` from `nodes` (reset: fails fast).
pub(super) fn cut(env: &mut Env, client: usize, nodes: &[usize]) -> Result<(), Error> {
    env.inject(&Fault::Partition {
        clients: vec![client],
        nodes: nodes.to_vec(),
        mode: Mode::Reset,
    })
}
