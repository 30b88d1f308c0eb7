//! Run first: `cargo run --example slot_claims` (needs `redis-server` on
//! PATH; starts and stops three local masters itself).
//!
//! Slot claims ([`Redlock::slots`]): three hosts fire the same cron slot, one runs it, and a
//! host that fires late still sees it completed. A slot whose runner gives up reads as
//! abandoned; a claimer with `retry_abandoned` runs it again under a higher fencing token.

use std::error::Error;

use quorumlock::{Redlock, SlotClaim, SlotOptions};
use quorumlock_testkit::RedisCluster;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let cluster = RedisCluster::start(3)?;
    let locks = Redlock::builder().nodes(cluster.urls()).build()?.fenced();
    // Name the slot after the time the job was due, never after the time a host picks it up.
    let slot = "2026-01-01T02:00Z";

    let host = |name: &str| SlotOptions::new().runner(name);
    let (opts_a, opts_b, opts_c) = (host("host-a"), host("host-b"), host("host-c"));
    let (a, b, c) = tokio::join!(
        locks.slots().claim("nightly", slot, &opts_a),
        locks.slots().claim("nightly", slot, &opts_b),
        locks.slots().claim("nightly", slot, &opts_c),
    );
    let mut runs = 0;
    for (name, claim) in [("host-a", a?), ("host-b", b?), ("host-c", c?)] {
        match claim {
            SlotClaim::Claimed(run) => {
                runs += 1;
                println!(
                    "{name}: claimed, runs the job (token {})",
                    run.fence().unwrap_or_default()
                );
                run.complete().await?;
            }
            SlotClaim::RunningElsewhere(_) => println!("{name}: running elsewhere, skips it"),
            SlotClaim::Completed(_) | SlotClaim::Abandoned(_) => {
                println!("{name}: already run, skips it")
            }
        }
    }
    if runs != 1 {
        return Err(format!("the slot ran {runs} times").into());
    }
    let late = locks
        .slots()
        .claim("nightly", slot, &host("host-d"))
        .await?;
    println!(
        "host-d, late: completed = {}",
        matches!(late, SlotClaim::Completed(_))
    );

    let failed = "2026-01-02T02:00Z";
    let run = locks
        .slots()
        .claim("nightly", failed, &host("host-a"))
        .await?;
    let first = run
        .into_run()
        .ok_or("the first claim of a fresh slot was refused")?;
    let first_token = first.fence();
    first.abandon().await?; // the job failed
    let skip = locks
        .slots()
        .claim("nightly", failed, &host("host-b"))
        .await?;
    println!(
        "host-b after a failed run: abandoned = {}",
        matches!(skip, SlotClaim::Abandoned(_))
    );
    let retry = host("host-c").retry_abandoned(true);
    let again = locks.slots().claim("nightly", failed, &retry).await?;
    let again = again
        .into_run()
        .ok_or("retry_abandoned did not claim the slot")?;
    println!(
        "host-c retries: attempt {}, token {} (the failed run's: {})",
        again.attempt(),
        again.fence().unwrap_or_default(),
        first_token.unwrap_or_default()
    );
    again.complete().await?;
    Ok(())
}
