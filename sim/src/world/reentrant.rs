//! Reentrant locks: a worker per client takes one of a few resources as a reentrant owner
//! ([`Redlock::reentrant`]), re-enters it while it holds (one re-entry after another, or two at
//! once), extends, releases or drops the guards in any order (the outer one first, or last),
//! and now and then takes the same resources without an owner, so that plain holders and other
//! owners contend with every owner's hold.
//!
//! Each guard is a hold of its owner (see [`Hold::owner`](super::history::Hold::owner)):
//! `mutual-exclusion` counts an owner's overlapping guards as one holder, `token-order` lets a
//! re-entry keep its hold's token. As each re-entry is granted, `reentrant-token` checks that a
//! re-entry made while an earlier guard of its owner was valid throughout carries that guard's
//! token. At the end, `reentrant-leak`: the manager tracks no hold once every guard is gone.

use std::rc::Rc;
use std::time::Duration;

use quorumlock::{LockGuard, Owner, Redlock};

use super::checker::Granted;
use super::history::Kind;
use super::host::now;
use super::workload::{cancellable, grant_of, Client};
use crate::seed::SeedRng;

/// The resources reentrant owners and plain holders share.
const RESOURCES: u64 = 2;

/// A re-entry made while a guard of its owner was valid throughout returned another token.
pub const REENTRANT_TOKEN: &str = "reentrant-token";
/// The manager still tracked a reentrant hold after every guard was released or dropped.
pub const REENTRANT_LEAK: &str = "reentrant-leak";

/// The reentrant worker of `client`, until the stop time; then the leak check.
pub async fn worker(client: Rc<Client>, locks: Redlock, mut rng: SeedRng) {
    while now() < client.stop_at {
        let op = client.begin();
        let granted = session(&client, &locks, &mut rng, op).await;
        client.done(op);
        if !granted {
            Client::back_off(&mut rng).await;
        }
    }
    let tracked = quorumlock::footprint(&locks).reentrant_holds;
    if tracked > 0 {
        client.history.borrow_mut().violation(
            now(),
            REENTRANT_LEAK,
            format_args!("c{} still tracks {tracked} reentrant holds", client.index),
        );
    }
}

/// The guards an owner holds, with their hold indices.
type Guards = Vec<(LockGuard, usize)>;

/// One owner's session on one resource (or, one time in five, a plain holder's): whether its
/// first acquisition was granted. Operation `op` names the owner (its lock value is drawn
/// within it) and every guard's keys.
async fn session(client: &Client, locks: &Redlock, rng: &mut SeedRng, op: u32) -> bool {
    let resource = format!("r{}", rng.below(RESOURCES));
    let reentrant = !rng.one_in(5);
    let owner = client.tagged(op, async { Owner::new() }).await;
    let handle = match reentrant {
        true => locks.reentrant(owner),
        false => locks.clone(),
    };
    let who = reentrant.then_some(op);
    let mut guards: Guards = Vec::new();
    let Some(first) = enter(client, &handle, who, &resource, rng, op, &guards).await else {
        return false;
    };
    guards.push(first);
    if reentrant {
        for _ in 0..=rng.below(3) {
            match rng.one_in(6) {
                // Past the guards' validity now and then: the next re-entry begins a new hold
                // (with a new token) unless a later guard still keeps the old one on.
                true => tokio::time::sleep(Duration::from_millis(100 + rng.below(700))).await,
                false => client.hold_for(rng, Duration::from_millis(100)).await,
            }
            if rng.one_in(4) {
                // Two re-entries at once: both join the hold (or begin one together).
                let (mut ra, mut rb) = (SeedRng::new(rng.next_u64()), SeedRng::new(rng.next_u64()));
                let (a, b) = tokio::join!(
                    enter(client, &handle, who, &resource, &mut ra, op, &guards),
                    enter(client, &handle, who, &resource, &mut rb, op, &guards),
                );
                guards.extend(a.into_iter().chain(b));
            } else if let Some(again) =
                enter(client, &handle, who, &resource, rng, op, &guards).await
            {
                guards.push(again);
            }
            if rng.one_in(3) {
                leave(client, &mut guards, rng).await;
            }
        }
    }
    while !guards.is_empty() {
        client.hold_for(rng, Duration::from_millis(200)).await;
        leave(client, &mut guards, rng).await;
    }
    true
}

/// One acquisition of `resource` by `handle` (reentrant as `owner`, whose guards are
/// `guards`), perhaps dropped at an await point: its guard and hold, if granted.
async fn enter(
    client: &Client,
    handle: &Redlock,
    owner: Option<u32>,
    resource: &str,
    rng: &mut SeedRng,
    op: u32,
    guards: &Guards,
) -> Option<(LockGuard, usize)> {
    let ttl = Duration::from_millis(100 + rng.below(600));
    let cancel_after = rng
        .one_in(10)
        .then(|| Duration::from_micros(rng.below(20_000)));
    let asked = Granted::one_round_now(ttl);
    let got = cancellable(
        cancel_after,
        client.tagged(op, handle.try_lock(resource, ttl)),
    )
    .await;
    let Some(Ok(guard)) = got else {
        return None;
    };
    // A guard still valid once the grant is back was valid throughout the acquisition.
    let kept = guards
        .iter()
        .find(|(g, _)| g.is_valid())
        .and_then(|(g, _)| g.fence());
    if let Some(kept) = kept.filter(|_| owner.is_some()) {
        if guard.fence() != Some(kept) {
            client.history.borrow_mut().violation(
                now(),
                REENTRANT_TOKEN,
                format_args!(
                    "c{} {resource} re-entered with token {:?} while a guard with {kept} held",
                    client.index,
                    guard.fence()
                ),
            );
        }
    }
    let holds = client.granted_to(
        owner,
        Kind::Lock,
        &[resource.to_owned()],
        grant_of(asked, guard.remaining()),
        guard.fence(),
    );
    Some((guard, holds[0]))
}

/// Ends one of `guards`, picked at random: released (after an extension, now and then) or
/// dropped (its release goes on in the background).
async fn leave(client: &Client, guards: &mut Guards, rng: &mut SeedRng) {
    if guards.is_empty() {
        return;
    }
    let pick = usize::try_from(rng.below(guards.len() as u64)).unwrap_or(0);
    let (mut guard, hold) = guards.swap_remove(pick);
    if rng.one_in(5) {
        let extends_until = client.history.borrow().holds[hold].until;
        let ttl = guard.ttl();
        let asked = Granted::one_round_now(ttl);
        let extended = guard.extend(ttl).await;
        client.end(&[hold]);
        if extended.is_ok() {
            let owner = client.history.borrow().holds[hold].owner;
            let again = client.granted_to(
                owner,
                Kind::Lock,
                &[guard.resource().to_owned()],
                Granted {
                    remaining: guard.remaining(),
                    extends_until: Some(extends_until),
                    ..asked
                },
                None,
            );
            guards.push((guard, again[0]));
            return;
        }
    }
    client.end(&[hold]);
    match rng.one_in(4) {
        true => drop(guard),
        false => {
            let _ = guard.release().await;
        }
    }
}
