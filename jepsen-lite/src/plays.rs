//! The scripted scenarios' plays: each drives its clients step by step through the proxy and
//! the nemesis so that the fault lands exactly where the scenario needs it (between A's grant
//! and B's attempt, after A's last check, ...), and ends with a heal and a liveness probe.

use std::time::{Duration, Instant};

use quorumlock::testing::{Mode, Modes};
use serde_json::json;

use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::backup::Taken;
use crate::nemesis::{aof_incr, restart_delay, Fault, Verb};
use crate::scenario::{Restart, Script};

async fn sleep(d: Duration) {
    tokio::time::sleep(d).await;
}

/// Cuts client `client` from `nodes` (reset: fails fast).
fn cut(env: &mut Env, client: usize, nodes: &[usize]) -> Result<(), Error> {
    env.inject(&Fault::Partition {
        clients: vec![client],
        nodes: nodes.to_vec(),
        mode: Mode::Reset,
    })
}

/// Plays a scripted scenario (not a random one), ending with a heal and a liveness probe;
/// findings that are not in the history (an extension that should have been refused) go to
/// `notes`.
///
/// # Errors
///
/// When a step cannot be carried out or a client does not answer in time.
pub async fn play(env: &mut Env, notes: &mut Vec<String>) -> Result<(), Error> {
    let ttl = env.ttl();
    let ttl_ms = env.sc.ttl_ms;
    match env.sc.script {
        Script::Random(_) | Script::Composed => {
            return Err("a random scenario has no script".into());
        }
        Script::ClientPause => {
            env.phase("A acquires, checks, pauses itself");
            env.cycle(
                0,
                CycleSpec {
                    pause_after_check: true,
                    min_remaining_ms: Some(ttl_ms / 2),
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "checked").await?;
            let t = Instant::now();
            while !env.clients[0].is_stopped() {
                if t.elapsed() > Duration::from_secs(5) {
                    return Err("client 0 did not stop".into());
                }
                sleep(Duration::from_millis(5)).await;
            }
            env.nemesis.evidence.record(
                "pause client 0 after its check",
                Ok("client process in state T".to_string()),
            );
            env.nemesis.record(Verb::PauseClient, json!({"client": 0}));
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B runs while A is paused");
            env.cycle(1, env.spec("r")).await?;
            env.wait(1, "done").await?;
            env.clients[0].signal(nix::sys::signal::Signal::SIGCONT);
            env.nemesis.record(Verb::ResumeClient, json!({"client": 0}));
            env.wait(0, "done").await?;
        }
        Script::SlowCs => {
            env.phase("A acquires and reads");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    min_remaining_ms: None,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B runs while A is still working");
            env.cycle(1, env.spec("r")).await?;
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::Crash(restart) => {
            // The delayed restart and its mutant: A keeps its lock (no release) and B polls from
            // the crash on, so only the delay can keep B from {2,3,4} while A holds.
            let b_polls_through_restart =
                matches!(restart, Restart::DelayedEmpty | Restart::UndelayedEmpty);
            let delay = if restart == Restart::DelayedEmpty {
                restart_delay(ttl)
            } else {
                Duration::ZERO
            };
            cut(env, 0, &[3, 4])?;
            cut(env, 1, &[0, 1])?;
            let aof_before = aof_incr(env.masters[2].dir()).map(|p| {
                (
                    p.clone(),
                    std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0),
                )
            });
            if restart == Restart::Snapshot {
                // What node 2 will come back with: everything before A's lock.
                tokio::task::block_in_place(|| env.masters[2].command(&["SAVE"]))?;
                env.nemesis.record(Verb::SaveSnapshot, json!({"node": 2}));
            }
            // What node 2 will be restored from: everything before A's lock.
            let backup = if restart == Restart::RestoredBackup {
                let taken = tokio::task::block_in_place(|| Taken::from(&env.masters[2]))?;
                env.nemesis.record(Verb::Backup, json!({"node": 2}));
                Some(taken)
            } else {
                None
            };
            env.phase("A acquires {0,1,2}");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    release: !b_polls_through_restart,
                    ..env.spec("r")
                },
            )
            .await?;
            let acquired = env.wait(0, "acquired").await?;
            if !acquired.ok {
                return Err(format!("A could not acquire: {}", acquired.detail).into());
            }
            env.wait(0, "read").await?;
            env.phase("node 2 crashes");
            let crashed_pid = env.masters[2].pid();
            tokio::task::block_in_place(|| env.masters[2].kill())?;
            let killed = !env.masters[2].is_running();
            env.nemesis.record(Verb::Kill, json!({"node": 2}));
            let b_spec = CycleSpec {
                sleep_ms: 200,
                // B must get its chance while A still believes it holds the lock, also on a
                // loaded box where the restart and B's first connections are slow: it keeps
                // trying for half of A's TTL (a quick matrix under load once saw B give up
                // after the default 1 s, and this must-break scenario held), after the delay.
                acquire_deadline_ms: ttl_ms / 2
                    + u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                ..env.spec("r")
            };
            if b_polls_through_restart {
                env.phase("B polls {2,3,4} while node 2 is down");
                env.cycle(1, b_spec.clone()).await?;
                sleep(delay).await;
            }
            match restart {
                Restart::Immediate | Restart::Snapshot => {
                    tokio::task::block_in_place(|| env.masters[2].restart())?
                }
                Restart::PowerLoss => {
                    // The writes since the sample were never fsynced: they are gone.
                    let (path, len) = aof_before.ok_or("node 2 has no AOF to truncate")?;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)?
                        .set_len(len)?;
                    env.nemesis
                        .record(Verb::TruncateAof, json!({"node": 2, "bytes": len}));
                    tokio::task::block_in_place(|| env.masters[2].restart())?;
                }
                Restart::ImmediateEmpty | Restart::DelayedEmpty | Restart::UndelayedEmpty => {
                    tokio::task::block_in_place(|| env.masters[2].restart_empty())?;
                }
                Restart::RestoredBackup => {
                    let taken = backup.as_ref().ok_or("node 2 has no backup to restore")?;
                    tokio::task::block_in_place(|| taken.restore(&mut env.masters[2]))?;
                }
            }
            let restarted_pid = env.masters[2].pid();
            // A restored master must also show that it came back with the backup's data.
            let restored = match &backup {
                Some(taken) => tokio::task::block_in_place(|| taken.proof(&env.masters[2]))
                    .map(|proof| format!(", {proof}")),
                None => Ok(String::new()),
            };
            let check = match (crashed_pid, restarted_pid) {
                (Some(old), Some(new)) if killed && old != new => {
                    restored.map(|proof| format!("pid {old} killed, pid {new} serving{proof}"))
                }
                (old, new) => Err(format!(
                    "crash not shown: killed {killed}, pid before {old:?}, after {new:?}"
                )),
            };
            env.nemesis
                .evidence
                .record(format!("crash node 2, restart {restart:?}"), check);
            env.nemesis.record(
                Verb::Restart,
                json!({"node": 2, "how": format!("{restart:?}")}),
            );
            if !b_polls_through_restart {
                env.phase("B tries {2,3,4}");
                env.cycle(1, b_spec).await?;
            }
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::ClockJump(offset_ms) => {
            cut(env, 0, &[3, 4])?;
            cut(env, 1, &[0, 1])?;
            env.phase("A acquires {0,1,2}");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            env.inject(&Fault::ClockBump { node: 2, offset_ms })?;
            env.phase("B tries {2,3,4}");
            env.cycle(
                1,
                CycleSpec {
                    sleep_ms: 200,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(1, "done").await?;
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
        }
        Script::ClockRate(ppm) => {
            env.inject(&Fault::ClockRate { ppm })?;
            env.phase("A acquires and keeps the lock");
            env.cycle(
                0,
                CycleSpec {
                    release: false,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "done").await?;
            env.phase("B polls while A's keys expire");
            let spec = CycleSpec {
                acquire_deadline_ms: ttl_ms + 1000,
                ..env.spec("r")
            };
            env.cycle(1, spec).await?;
            env.wait(1, "done").await?;
        }
        Script::SplitMinority => {
            cut(env, 0, &[2, 3, 4])?;
            cut(env, 1, &[0, 1])?;
            env.phase("A and B acquire at once");
            let spec = CycleSpec {
                wait_go: true,
                ..env.spec("r")
            };
            // B tries for longer than a TTL: a round of its own that failed on a loaded box (a
            // node timeout on one of its three masters) can leave a key there for up to a TTL
            // (its SET landing after the undo), refusing B's next rounds meanwhile; seen in
            // two quick-matrix runs, where B gave up after 1 s and the run had too few claims.
            let b = CycleSpec {
                acquire_deadline_ms: ttl_ms + 1000,
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
        }
        Script::HeldReplies => {
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
            sleep(ttl + Duration::from_millis(500)).await;
            for n in 0..env.masters.len() {
                env.proxy.set(0, n, Modes::PASS);
            }
            env.nemesis.record(Verb::Release, json!({"client": 0}));
            env.phase("B polls");
            env.cycle(
                1,
                CycleSpec {
                    acquire_deadline_ms: ttl_ms,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "done").await?;
            env.wait(1, "done").await?;
        }
        Script::LateRelease => {
            env.phase("A acquires and stalls past its TTL");
            env.cycle(
                0,
                CycleSpec {
                    wait_go: true,
                    access: false,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(0, "read").await?;
            sleep(ttl + Duration::from_millis(300)).await;
            env.phase("B acquires");
            env.cycle(
                1,
                CycleSpec {
                    wait_go: true,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(1, "read").await?;
            env.phase("A releases late; C tries");
            env.clients[0].send(&Command::Go).await?;
            env.wait(0, "done").await?;
            env.cycle(
                2,
                CycleSpec {
                    acquire_deadline_ms: 300,
                    sleep_ms: 200,
                    ..env.spec("r")
                },
            )
            .await?;
            env.wait(2, "done").await?;
            env.clients[1].send(&Command::Go).await?;
            env.wait(1, "done").await?;
        }
        Script::ExtendAfterExpiry => {
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
                    "an extension succeeded although the lock's keys were gone on 3 of 5 nodes"
                        .into(),
                );
            }
            env.wait(0, "done").await?;
        }
    }
    env.heal()?;
    env.phase("liveness probe");
    let probe = CycleSpec {
        acquire_deadline_ms: ttl_ms + 2000,
        ..env.spec("r")
    };
    env.cycle(0, probe).await?;
    env.wait(0, "done").await?;
    Ok(())
}
