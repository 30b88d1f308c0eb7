//! A client host: the real [`Redlock`] against the simulated masters, workers taking locks,
//! sets, semaphore permits and read-write locks at random (from the seed), holding them for a
//! while (sometimes past their validity: a paused holder), extending some, cancelling some
//! acquisitions at an await point; then, after the nemesis healed everything, a liveness probe.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use quorumlock::{LockError, Redlock};

use super::checker::{self, drift, Granted};
use super::history::{History, Hold, Kind};
use super::host::{now, Served, PORT};
use super::seams::SimWorld;
use super::{batches, leases, reentrant, scheduled, slots, waiter};
use crate::seed::SeedRng;

/// How many resources the workers lock one at a time, and as sets of two.
const LOCKS: u64 = 6;
const SET_RESOURCES: u64 = 6;
/// The semaphore's permits.
pub const PERMITS: usize = 2;
/// The longest TTL a client asks for: restart protection's quarantine follows it.
pub const MAX_TTL: Duration = Duration::from_secs(2);
/// How long after the heal every client must get a lock (the quarantine of a master restarted
/// just before the heal, its drift, then a few retries).
pub const LIVENESS_BOUND: Duration = Duration::from_secs(6);

/// Slot workers per client, beside the workers.
const SLOT_WORKERS: u64 = 2;

/// One client's part of the run.
pub struct Client {
    /// Its index (host `c{index}`).
    pub index: usize,
    /// How many workload clients the run has (hosts `c0`, `c1`, ...).
    pub clients: usize,
    /// How many masters there are (hosts `m0`, `m1`, ...).
    pub masters: usize,
    /// The masters themselves, for checkers that read their data.
    pub served: Vec<Rc<Served>>,
    /// Concurrent workers.
    pub workers: usize,
    /// When the workers stop and the nemesis heals.
    pub stop_at: Duration,
    /// The library mutant the client runs, by name, if any.
    pub mutant: Option<String>,
    /// Whether its managers run with restart protection (always, but to show what breaks
    /// without it: see `beyond`).
    pub restart_protection: bool,
    /// The seed of its workload.
    pub seed: u64,
    /// The library's outside world, which attributes the lock values operations draw.
    pub world: Rc<SimWorld>,
    /// Where holds and events go.
    pub history: Rc<RefCell<History>>,
}

/// A failed liveness probe, reported through the history.
pub const LIVENESS: &str = "liveness";

impl Client {
    /// The client's software.
    pub async fn run(self) -> turmoil::Result {
        let locks = self.manager()?;
        if self.index == 0 && self.restart_protection {
            // A brand-new deployment looks like restarted masters: vouch for them once.
            while locks.provision().await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let waiting = self.manager()?;
        let me = Rc::new(self);
        let rng = |w: u64| SeedRng::new(me.seed ^ w.wrapping_mul(0x9E37_79B9));
        let mut workers: Vec<_> = (0..me.workers as u64)
            .map(|w| tokio::task::spawn_local(Rc::clone(&me).worker(locks.clone(), rng(w))))
            .collect();
        for s in 0..SLOT_WORKERS {
            let name = format!("c{}s{s}", me.index);
            let slots = slots::worker(Rc::clone(&me), locks.clone(), rng(1000 + s), name);
            workers.push(tokio::task::spawn_local(slots));
        }
        let waiter = waiter::waiter(Rc::clone(&me), waiting, rng(2000));
        workers.push(tokio::task::spawn_local(waiter));
        let leased = leases::lease_worker(Rc::clone(&me), locks.clone(), rng(3000));
        workers.push(tokio::task::spawn_local(leased));
        let campaigner = leases::campaigner(Rc::clone(&me), locks.clone(), rng(4000));
        workers.push(tokio::task::spawn_local(campaigner));
        let batches = batches::worker(Rc::clone(&me), locks.clone(), rng(5000));
        workers.push(tokio::task::spawn_local(batches));
        let reentrant = reentrant::worker(Rc::clone(&me), locks.clone(), rng(6000));
        workers.push(tokio::task::spawn_local(reentrant));
        let scheduler = scheduled::runner(Rc::clone(&me), locks.clone());
        workers.push(tokio::task::spawn_local(scheduler));
        for worker in workers {
            worker.await?;
        }
        me.liveness(&locks).await;
        // Background cleanups and deletes still in flight land before the run ends, so that
        // the masters' data at its end is what the library leaves.
        tokio::time::sleep(super::lifetime::GRACE).await;
        Ok(())
    }

    /// A manager of this client: fenced, restart protection as the run says, the mutant's.
    pub(super) fn manager(&self) -> Result<Redlock, Box<dyn std::error::Error>> {
        self.manager_polling(Duration::from_millis(50))
    }

    /// [`Self::manager`], its waiters polling below `retry_delay`.
    pub(super) fn manager_polling(
        &self,
        retry_delay: Duration,
    ) -> Result<Redlock, Box<dyn std::error::Error>> {
        let nodes = (0..self.masters).map(|m| format!("redis://m{m}:{PORT}"));
        let builder = Redlock::builder()
            .nodes(nodes)
            .restart_protection(self.restart_protection)
            .max_ttl(MAX_TTL)
            .node_timeout(Duration::from_millis(50))
            .connect_timeout(Duration::from_millis(200))
            .retry_count(3)
            .retry_delay(retry_delay);
        let builder = match &self.mutant {
            #[cfg(quorumlock_mutants)]
            Some(name) => builder.mutant(super::mutants::by_name(name)?),
            #[cfg(not(quorumlock_mutants))]
            Some(name) => match super::mutants::by_name(name)? {},
            None => builder,
        };
        Ok(builder.build()?.fenced())
    }

    async fn worker(self: Rc<Self>, locks: Redlock, mut rng: SeedRng) {
        while now() < self.stop_at {
            let op = self.begin();
            let granted = self.operation(&locks, &mut rng, op).await;
            self.done(op);
            if !granted {
                Self::back_off(&mut rng).await;
            }
        }
    }

    /// One operation of a worker, numbered `op`: whether it was granted.
    async fn operation(&self, locks: &Redlock, rng: &mut SeedRng, op: u32) -> bool {
        // Mostly 100 ms - 1 s; one in eight short, so that a slow round can outlive it.
        let ttl = match rng.one_in(8) {
            true => Duration::from_millis(10 + rng.below(40)),
            false => Duration::from_millis(100 + rng.below(900)),
        };
        let pick = rng.below(100);
        // Some acquisitions are dropped at an await point (a cancelled caller).
        let cancel_after = rng
            .one_in(10)
            .then(|| Duration::from_micros(rng.below(20_000)));
        let asked = Granted::one_round_now(ttl);
        match pick {
            0..35 => {
                let resource = format!("l{}", rng.below(LOCKS));
                let got = cancellable(
                    cancel_after,
                    self.tagged(op, locks.try_lock(&resource, ttl)),
                )
                .await;
                let Some(Ok(mut guard)) = got else {
                    return false;
                };
                let holds = self.granted(
                    Kind::Lock,
                    &[resource],
                    grant_of(asked, guard.remaining()),
                    guard.fence(),
                );
                if rng.one_in(4) {
                    // Extended: after a while, or at the last moment (just before or just
                    // after its validity runs out, while its keys may still be there).
                    match rng.one_in(10) {
                        true => {
                            let ms = drift(ttl).as_millis() as u64;
                            let validity = guard.remaining().as_millis() as u64;
                            let at = (validity + rng.below(2 * ms + 1)).saturating_sub(ms);
                            tokio::time::sleep(Duration::from_millis(at)).await;
                        }
                        false => self.hold_for(rng, ttl).await,
                    }
                    let extends_until = self.history.borrow().holds[holds[0]].until;
                    let extend_asked = now();
                    let extended = guard.extend(ttl).await;
                    self.history.borrow_mut().release(holds[0], now());
                    if extended.is_ok() {
                        let again = self.granted_again(
                            Kind::Lock,
                            guard.resource(),
                            Granted {
                                asked: extend_asked,
                                remaining: guard.remaining(),
                                extends_until: Some(extends_until),
                                ..asked
                            },
                        );
                        self.hold_for(rng, ttl).await;
                        self.end(&[again]);
                    }
                } else {
                    self.hold_for(rng, ttl).await;
                }
                self.end(&holds);
                let _ = guard.release().await;
            }
            35..50 => {
                let a = rng.below(SET_RESOURCES);
                let b = (a + 1 + rng.below(SET_RESOURCES - 1)) % SET_RESOURCES;
                let resources = [format!("s{a}"), format!("s{b}")];
                let got = cancellable(
                    cancel_after,
                    self.tagged(op, locks.set(&resources).try_lock(ttl)),
                )
                .await;
                let Some(Ok(guard)) = got else {
                    return false;
                };
                let holds = self.granted(
                    Kind::Set,
                    &resources,
                    grant_of(asked, guard.remaining()),
                    guard.fence(),
                );
                self.hold_for(rng, ttl).await;
                self.end(&holds);
                let _ = guard.release().await;
            }
            50..70 => {
                let semaphore = locks.semaphore("sem", PERMITS);
                let got =
                    cancellable(cancel_after, self.tagged(op, semaphore.try_acquire(ttl))).await;
                let Some(Ok(guard)) = got else {
                    return false;
                };
                let holds = self.granted(
                    Kind::Permit,
                    &["sem".into()],
                    rounds_of(asked, guard.remaining()),
                    None,
                );
                self.hold_for(rng, ttl).await;
                self.end(&holds);
                let _ = guard.release().await;
            }
            70..90 => {
                let got = cancellable(
                    cancel_after,
                    self.tagged(op, locks.rw_lock("rw").try_read(ttl)),
                )
                .await;
                let Some(Ok(guard)) = got else {
                    return false;
                };
                let holds = self.granted(
                    Kind::Read,
                    &["rw".into()],
                    rounds_of(asked, guard.remaining()),
                    None,
                );
                self.hold_for(rng, ttl).await;
                self.end(&holds);
                let _ = guard.release().await;
            }
            _ => {
                // Readers arrive without a gap: a writer that only tries gets in a few times a
                // run. One in ten waits a little, its intent holding new readers back.
                let rw = locks.rw_lock("rw");
                let write: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> =
                    match rng.one_in(10) {
                        true => {
                            let patience = Duration::from_millis(100 + rng.below(300));
                            let deadline = tokio::time::Instant::now().into_std() + patience;
                            Box::pin(rw.write_until(ttl, deadline))
                        }
                        false => Box::pin(rw.try_write(ttl)),
                    };
                let got = cancellable(cancel_after, self.tagged(op, write)).await;
                let Some(Ok(guard)) = got else {
                    return false;
                };
                let holds = self.granted(
                    Kind::Write,
                    &["rw".into()],
                    rounds_of(asked, guard.remaining()),
                    None,
                );
                self.hold_for(rng, ttl).await;
                self.end(&holds);
                let _ = guard.release().await;
            }
        }
        true
    }

    /// A new operation of this client, called now: its number, for [`Self::tagged`] and
    /// [`Self::done`].
    pub(super) fn begin(&self) -> u32 {
        self.history.borrow_mut().begin_op(self.index, now())
    }

    /// `future`, polled as operation `op`: the lock values it draws are `op`'s.
    pub(super) async fn tagged<F: std::future::Future>(&self, op: u32, future: F) -> F::Output {
        self.world.tagged(op, future).await
    }

    /// Operation `op` ended now: it and whatever it held were released, or it failed.
    pub(super) fn done(&self, op: u32) {
        self.history.borrow_mut().end_op(op, now());
    }

    /// Holds for a while: mostly briefly, sometimes up to half its `ttl`, now and then past it
    /// (a paused holder, which then releases a lock that may have moved on).
    pub(super) async fn hold_for(&self, rng: &mut SeedRng, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let hold = match rng.below(100) {
            0..3 => ms + rng.below(2 * ms),
            3..20 => rng.below(ms / 2 + 1),
            _ => rng.below(10),
        };
        tokio::time::sleep(Duration::from_millis(hold)).await;
    }

    /// After a refused or failed acquisition: a short random pause, so that a worker does not
    /// spin on a contended resource.
    pub(super) async fn back_off(rng: &mut SeedRng) {
        tokio::time::sleep(Duration::from_millis(1 + rng.below(20))).await;
    }

    /// A grant of `resources` (one hold each), checked as it is made; the holds' indices.
    pub(super) fn granted(
        &self,
        kind: Kind,
        resources: &[String],
        grant: Granted,
        token: Option<u64>,
    ) -> Vec<usize> {
        self.granted_to(None, kind, resources, grant, token)
    }

    /// [`Self::granted`], to the reentrant owner `owner` if any (see [`Hold::owner`]).
    pub(super) fn granted_to(
        &self,
        owner: Option<u32>,
        kind: Kind,
        resources: &[String],
        mut grant: Granted,
        token: Option<u64>,
    ) -> Vec<usize> {
        grant.granted = now();
        let mut history = self.history.borrow_mut();
        history.grants += 1;
        self.check(&mut history, kind, &resources[0], grant);
        resources
            .iter()
            .map(|group| {
                history.hold(Hold {
                    client: self.index,
                    kind,
                    group: group.clone(),
                    asked: grant.asked,
                    granted: grant.granted,
                    until: grant.granted + grant.remaining,
                    token,
                    valid_until: None,
                    owner,
                })
            })
            .collect()
    }

    /// An extension: a new hold (without a token), checked as it is made; its index.
    fn granted_again(&self, kind: Kind, resource: &str, mut grant: Granted) -> usize {
        grant.granted = now();
        let mut history = self.history.borrow_mut();
        self.check(&mut history, kind, resource, grant);
        history.hold(Hold {
            client: self.index,
            kind,
            group: resource.to_owned(),
            asked: grant.asked,
            granted: grant.granted,
            until: grant.granted + grant.remaining,
            token: None,
            valid_until: None,
            owner: None,
        })
    }

    fn check(&self, history: &mut History, kind: Kind, resource: &str, grant: Granted) {
        if let Some(broken) = checker::grant(grant) {
            history.violation(
                grant.granted,
                broken,
                format_args!(
                    "c{} {kind:?} {resource} asked={} ttl={} remaining={} extends_until={:?}",
                    self.index,
                    grant.asked.as_micros(),
                    grant.ttl.as_millis(),
                    grant.remaining.as_micros(),
                    grant.extends_until.map(|u| u.as_micros()),
                ),
            );
        }
    }

    /// The holds `holds`, kept by a lease valid until `valid_until` (the library's instant),
    /// end now.
    pub(super) fn end_leased(&self, holds: &[usize], valid_until: std::time::Instant) {
        let valid_until = super::host::sim_time_of(valid_until);
        let mut history = self.history.borrow_mut();
        for &hold in holds {
            if let Some(hold) = history.holds.get_mut(hold) {
                hold.valid_until = Some(valid_until);
            }
        }
        drop(history);
        self.end(holds);
    }

    /// The holds `holds` end now.
    pub(super) fn end(&self, holds: &[usize]) {
        let at = now();
        let mut history = self.history.borrow_mut();
        for &hold in holds {
            history.release(hold, at);
        }
    }

    /// After the heal, the client must get a lock of its own within [`LIVENESS_BOUND`].
    async fn liveness(&self, locks: &Redlock) {
        let healed = now();
        let resource = format!("live{}", self.index);
        let mut outcome: Result<(), LockError> = Ok(());
        while now() < healed + LIVENESS_BOUND {
            let op = self.begin();
            let got = self.tagged(op, locks.try_lock(&resource, Duration::from_millis(500)));
            let got = got.await;
            if got.is_err() {
                self.done(op);
            }
            match got {
                Ok(guard) => {
                    let _ = guard.release().await;
                    self.done(op);
                    let took = now() - healed;
                    let mut history = self.history.borrow_mut();
                    history.event(
                        now(),
                        format_args!("c{} live after {}ms", self.index, took.as_millis()),
                    );
                    return;
                }
                Err(error) => outcome = Err(error),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let error = outcome.err().map(|e| e.to_string()).unwrap_or_default();
        let mut history = self.history.borrow_mut();
        history.event(
            now(),
            format_args!("c{} {LIVENESS} violated: {error}", self.index),
        );
        history.dead.push(self.index);
    }
}

/// `asked` with the validity its call returned.
pub(super) fn grant_of(asked: Granted, remaining: Duration) -> Granted {
    Granted { remaining, ..asked }
}

/// `asked` with the validity a call of several rounds returned.
fn rounds_of(asked: Granted, remaining: Duration) -> Granted {
    Granted {
        remaining,
        one_round: false,
        ..asked
    }
}

/// `future`, dropped after `after` if it has not finished by then: `None`.
pub(super) async fn cancellable<F: std::future::Future>(
    after: Option<Duration>,
    future: F,
) -> Option<F::Output> {
    match after {
        Some(after) => tokio::time::timeout(after, future).await.ok(),
        None => Some(future.await),
    }
}
