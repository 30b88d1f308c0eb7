//! Crash scenarios: A holds on {0,1,2}, master 2 crashes and comes back as the restart kind
//! says, and B, cut from {0,1}, tries {2,3,4}. Whether B may win depends on what master 2 came
//! back with and on restart protection. The crash itself is [`crate::nemesis::crash`]'s.

use std::time::Duration;

use quorumlock_testkit::Persistence;

use super::play::{cut, sleep};
use super::{base, fenced, Expect, Restart, Scenario, Script};
use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::Fault;

/// This family's scenarios, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    use Expect::{Break, Hold};
    let crash = |name, expect, restart, ttl_ms, persistence, about| Scenario {
        about,
        ttl_ms,
        persistence,
        ..base(name, "crash", expect, Script::Crash(restart))
    };
    let empty = crash(
        "crash-restart-empty",
        Break,
        Restart::ImmediateEmpty,
        6000,
        Persistence::None,
        "A holds {0,1,2}; node 2 SIGKILLed and restarted empty at once; B takes {2,3,4}",
    );
    let delayed = crash(
        "crash-restart-delayed",
        Hold,
        Restart::DelayedEmpty,
        4000,
        Persistence::None,
        "as crash-restart-empty, but node 2 restarts empty after TTL+drift+500ms while B polls",
    );
    let power_loss = crash(
        "crash-power-loss-everysec",
        Break,
        Restart::PowerLoss,
        4000,
        Persistence::AofEverySec,
        "as crash-restart-empty, appendfsync everysec, power loss (AOF tail truncated)",
    );
    let snapshot = crash(
        "crash-restart-snapshot",
        Break,
        Restart::Snapshot,
        4000,
        Persistence::None,
        "as crash-restart-empty, but node 2 reloads an RDB snapshot older than the lock",
    );
    let backup = crash(
        "crash-restored-backup",
        Break,
        Restart::RestoredBackup,
        4000,
        Persistence::AofAlways,
        "as crash-restart-fsync-always, but node 2 is restored from a backup of its AOF taken before the lock",
    );
    let protected = |s: &Scenario, name, about| Scenario {
        name,
        about,
        expect: Hold,
        ttl_ms: 4000,
        protection: true,
        ..s.clone()
    };
    let derived = [
        crash(
            "crash-restart-fsync-always",
            Hold,
            Restart::Immediate,
            4000,
            Persistence::AofAlways,
            "as crash-restart-empty, but appendfsync always and a plain restart",
        ),
        Scenario {
            quick: false,
            ..crash(
                "crash-sigkill-everysec",
                Hold,
                Restart::Immediate,
                4000,
                Persistence::AofEverySec,
                "as crash-power-loss-everysec, but a plain SIGKILL: the page cache keeps the key",
            )
        },
        protected(
            &empty,
            "crash-restart-empty-protected",
            "as crash-restart-empty, with restart protection: node 2 sits out one max TTL",
        ),
        protected(
            &snapshot,
            "crash-restart-snapshot-protected",
            "as crash-restart-snapshot, with restart protection: node 2 sits out one max TTL",
        ),
        protected(
            &power_loss,
            "crash-power-loss-protected",
            "as crash-power-loss-everysec, with restart protection: node 2 sits out one max TTL",
        ),
        protected(
            &backup,
            "crash-restored-backup-protected",
            "as crash-restored-backup, with restart protection: the durable node 2 sits out one max TTL",
        ),
        fenced(&empty, "crash-restart-empty-fenced", true),
        fenced(&power_loss, "crash-power-loss-fenced", false),
        // The delay must be what keeps crash-restart-delayed safe: without it, it breaks.
        Scenario {
            name: "mutant-restart-at-once",
            kind: "mutant",
            expect: Break,
            about: "crash-restart-delayed with the restart at once: must break",
            script: Script::Crash(Restart::UndelayedEmpty),
            ..delayed.clone()
        },
    ];
    let mut v = vec![empty, delayed, power_loss, snapshot, backup];
    v.extend(derived);
    v
}

/// A holds {0,1,2} (cut from 3,4); master 2 crashes and comes back as `restart` says; B (cut
/// from 0,1) tries {2,3,4}, after the restart or, for a delayed restart and its mutant, from
/// the crash on.
pub(super) async fn play(env: &mut Env, restart: Restart) -> Result<(), Error> {
    // The delayed restart and its mutant: A keeps its lock (no release) and B polls from the
    // crash on, so only the delay can keep B from {2,3,4} while A holds.
    let b_polls_through_restart =
        matches!(restart, Restart::DelayedEmpty | Restart::UndelayedEmpty);
    let crash = Fault::Crash { node: 2, restart };
    cut(env, 0, &[3, 4])?;
    cut(env, 1, &[0, 1])?;
    // What master 2 can come back with: everything before A's lock (its AOF's size, a
    // snapshot, a backup).
    env.with_nemesis(|n, t| {
        n.begin_step(t, std::slice::from_ref(&crash));
        Ok(())
    })?;
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
    env.inject(&crash)?;
    let down_for = env.nemesis.due_in();
    // B must get its chance while A still believes it holds the lock, also on a loaded box
    // where the restart and B's first connections are slow: it keeps trying for half of A's
    // TTL (after the downtime, when it polls through it).
    let polled_downtime = if b_polls_through_restart {
        down_for
    } else {
        Duration::ZERO
    };
    let b_spec = CycleSpec {
        sleep_ms: 200,
        acquire_deadline_ms: env.sc.ttl_ms / 2
            + u64::try_from(polled_downtime.as_millis()).unwrap_or(u64::MAX),
        ..env.spec("r")
    };
    if b_polls_through_restart {
        env.phase("B polls {2,3,4} while node 2 is down");
        env.cycle(1, b_spec.clone()).await?;
    }
    sleep(down_for).await;
    env.with_nemesis(|n, t| n.restart_due(t))?;
    if !b_polls_through_restart {
        env.phase("B tries {2,3,4}");
        env.cycle(1, b_spec).await?;
    }
    env.wait(1, "done").await?;
    env.clients[0].send(&Command::Go).await?;
    env.wait(0, "done").await?;
    Ok(())
}
