//! Clock scenarios: a master's wall clock jumps while A holds on it, or every master's clock
//! runs fast while A's keys expire. Outside Redlock's model beyond the drift allowance.

use super::play::cut;
use super::{base, fenced, mutant, Expect, Scenario, Script};
use crate::client::{Command, CycleSpec};
use crate::env::{Env, Error};
use crate::nemesis::Fault;

/// This family's scenarios, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    use Expect::{Break, Hold};
    let forward = Scenario {
        about: "A holds {0,1,2}; node 2's wall clock jumps forward 2*TTL; B takes {2,3,4}",
        ttl_ms: 4000,
        ..base(
            "clock-jump-forward",
            "clock",
            Break,
            Script::ClockJump(8000),
        )
    };
    let within = Scenario {
        about: "all node clocks 0.9% fast (< the 1% drift allowance); B polls as A's keys expire",
        ttl_ms: 8000,
        retry_delay_ms: 2,
        ..base(
            "clock-fast-within-drift",
            "clock",
            Hold,
            Script::ClockRate(9000),
        )
    };
    let derived = [
        fenced(&forward, "clock-jump-forward-fenced", true),
        mutant(&within, "mutant-zero-drift", "zero-drift"),
    ];
    let mut v = vec![
        forward,
        Scenario {
            about: "A holds {0,1,2}; node 2's wall clock jumps back 2*TTL; B tries {2,3,4}",
            ttl_ms: 4000,
            ..base("clock-jump-back", "clock", Hold, Script::ClockJump(-8000))
        },
        within,
        Scenario {
            about: "all node clocks 5% fast (> the 1% drift allowance); B polls as A's keys expire",
            ttl_ms: 4000,
            retry_delay_ms: 2,
            ..base(
                "clock-fast-beyond-drift",
                "clock",
                Break,
                Script::ClockRate(50_000),
            )
        },
    ];
    v.extend(derived);
    v
}

/// A holds {0,1,2} (cut from 3,4); master 2's wall clock jumps by `offset_ms`; B (cut from
/// 0,1) tries {2,3,4}.
pub(super) async fn jump(env: &mut Env, offset_ms: i64) -> Result<(), Error> {
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
    Ok(())
}

/// Every master's clock runs `ppm` fast; A holds without releasing; B polls as A's keys
/// expire.
pub(super) async fn rate(env: &mut Env, ppm: i64) -> Result<(), Error> {
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
        acquire_deadline_ms: env.sc.ttl_ms + 1000,
        ..env.spec("r")
    };
    env.cycle(1, spec).await?;
    env.wait(1, "done").await?;
    Ok(())
}
