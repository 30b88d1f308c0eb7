//! Scenarios where the client is the fault: it pauses itself after its last validity check,
//! its critical section outlasts the TTL, or it releases late. Mutual exclusion of the claims
//! holds in each; only fencing keeps the effects apart.

use std::time::{Duration, Instant};

use serde_json::json;

use super::play::sleep;
use super::{base, fenced, mutant, Expect, Scenario, Script};
use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::Verb;

/// This family's scenarios, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    let pause = Scenario {
        about: "A SIGSTOPs itself after its last validity check, for TTL+300ms; unfenced register",
        ..base(
            "client-pause",
            "client pause",
            Expect::Break,
            Script::ClientPause,
        )
    };
    let slow = Scenario {
        about: "A's critical section outlasts the TTL, no extension, no check",
        ..base("slow-cs", "slow client", Expect::Break, Script::SlowCs)
    };
    let late = Scenario {
        about: "A's lease runs out, B acquires, A releases late (compare-and-delete); C tries",
        clients: 3,
        ..base(
            "late-release",
            "slow client",
            Expect::Hold,
            Script::LateRelease,
        )
    };
    let derived = [
        Scenario {
            about: "as slow-cs, but A's lock is kept alive by a lease (auto-extension)",
            keep_alive: true,
            name: "slow-cs-keepalive",
            expect: Expect::Hold,
            ..slow.clone()
        },
        Scenario {
            about: "as client-pause, with a lease: the pause stalls the renewals too",
            keep_alive: true,
            quick: false,
            name: "client-pause-keepalive",
            ..pause.clone()
        },
        fenced(&pause, "client-pause-fenced", true),
        fenced(&slow, "slow-cs-fenced", false),
        mutant(&late, "mutant-plain-del-release", "plain-del-release"),
    ];
    let mut v = vec![pause, slow, late];
    v.extend(derived);
    v
}

/// A acquires, checks and pauses itself (`SIGSTOP`) past the TTL; B runs meanwhile.
pub(super) async fn pause(env: &mut Env) -> Result<(), Error> {
    env.phase("A acquires, checks, pauses itself");
    env.cycle(
        0,
        CycleSpec {
            pause_after_check: true,
            min_remaining_ms: Some(env.sc.ttl_ms / 2),
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
    sleep(env.ttl() + Duration::from_millis(300)).await;
    env.phase("B runs while A is paused");
    env.cycle(1, env.spec("r")).await?;
    env.wait(1, "done").await?;
    env.clients[0].signal(nix::sys::signal::Signal::SIGCONT);
    env.nemesis.record(Verb::ResumeClient, json!({"client": 0}));
    env.wait(0, "done").await?;
    Ok(())
}

/// A acquires and reads, then works past the TTL without any check; B runs meanwhile.
pub(super) async fn slow_cs(env: &mut Env) -> Result<(), Error> {
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
    sleep(env.ttl() + Duration::from_millis(300)).await;
    env.phase("B runs while A is still working");
    env.cycle(1, env.spec("r")).await?;
    env.wait(1, "done").await?;
    env.clients[0].send(&Command::Go).await?;
    env.wait(0, "done").await?;
    Ok(())
}

/// A's lease runs out, B acquires, A releases late; C then tries while B holds: A's release
/// must not delete B's keys.
pub(super) async fn late_release(env: &mut Env) -> Result<(), Error> {
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
    sleep(env.ttl() + Duration::from_millis(300)).await;
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
    Ok(())
}
