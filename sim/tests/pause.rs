//! The vendored turmoil's host pause (`sim/vendor/turmoil`): a paused host runs nothing (no task,
//! no timer) and receives nothing while the others go on, and at the resume its clock jumps by
//! the pause at once, every timer that fell due meanwhile firing then.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

#[test]
fn a_paused_host_runs_nothing_and_resumes_with_its_clock_jumped() {
    let mut sim = turmoil::Builder::new()
        .tick_duration(Duration::from_millis(1))
        .simulation_duration(Duration::from_secs(60))
        .build();
    // Ticks of a task spawned on the host, each with the host's simulated time.
    let ticks: Rc<RefCell<Vec<Duration>>> = Rc::default();
    let slept_until = Rc::new(Cell::new(None::<Duration>));
    let (seen, woke) = (Rc::clone(&ticks), Rc::clone(&slept_until));
    sim.client("paused", async move {
        let seen = Rc::clone(&seen);
        let ticker = tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                seen.borrow_mut()
                    .push(turmoil::sim_elapsed().unwrap_or_default());
            }
        });
        let started = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The clock jumped with the resume: the sleep ends at it, not at its own deadline.
        woke.set(Some(started.elapsed()));
        ticker.abort();
        Ok(())
    });
    let steps = |sim: &mut turmoil::Sim<'_>, n: usize| {
        for _ in 0..n {
            sim.step().expect("a step");
        }
    };
    steps(&mut sim, 50);
    let before = ticks.borrow().len();
    assert!(before >= 4, "the ticker ran before the pause: {before}");
    sim.pause("paused");
    steps(&mut sim, 300);
    assert_eq!(ticks.borrow().len(), before, "nothing runs while paused");
    assert_eq!(slept_until.get(), None, "no timer fires while paused");
    sim.resume("paused");
    steps(&mut sim, 2);
    let woke = slept_until.get().expect("the sleep fired at the resume");
    assert!(
        woke >= Duration::from_millis(349) && woke <= Duration::from_millis(352),
        "the host's clock jumped by the pause: {woke:?}"
    );
    // The ticker's timers that fell due meanwhile fired once, at the resume, on the jumped
    // clock: its next tick reads the world's time.
    let after = ticks.borrow().clone();
    let resumed = *after.last().expect("a tick at the resume");
    assert!(
        after.len() <= before + 2,
        "one late tick, not one per 10 ms: {after:?}"
    );
    assert!(
        resumed >= Duration::from_millis(349),
        "the host's time followed the world's: {resumed:?}"
    );
}
