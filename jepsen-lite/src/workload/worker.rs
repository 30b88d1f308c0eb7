//! One process of a workload (`jepsen-lite workload-worker --config JSON`): a worker running
//! the [`election`](super::election), [`lock_all`](super::lock_all),
//! [`semaphore`](super::semaphore) or [`rw_lock`](super::rw_lock) loop, or an observer of the
//! election.
//!
//! Every worker builds its manager with fencing and restart protection on, and reports each
//! step to the controller's [store](super::request): the call, the grant with the validity it
//! read (`remaining()` first, then the clock, so that a preemption between the two lengthens
//! the claim, which the checker bounds independently, instead of hiding an overlap), each
//! write with the validity checked just before it, and the end of its belief. Under a library
//! mutant its manager runs the broken library.

use std::net::SocketAddr;
use std::time::Duration;

use quorumlock::Redlock;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::request::{Client, Kind, Request};
use super::{Mutant, WorkloadKind};
use crate::clock::now_ns;
use crate::process_env;

/// What a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Campaigns or locks, and writes.
    Worker,
    /// Observes the election and reports each item.
    Observer,
}

/// What the controller hands a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Election or lock-all.
    pub kind: WorkloadKind,
    /// Worker or observer.
    pub role: Role,
    /// The process's index (observers after the workers).
    pub id: usize,
    /// The masters' URLs.
    pub nodes: Vec<String>,
    /// The store.
    pub store: SocketAddr,
    /// The run's seed (each process mixes in its index and pid).
    pub seed: u64,
    /// A broken worker, which the checker must catch.
    pub mutant: Option<Mutant>,
    /// The lock and lease TTL, ms.
    pub ttl_ms: u64,
    /// The managers' max TTL (restart protection's quarantine), ms.
    pub max_ttl_ms: u64,
    /// The per-master timeout, ms.
    pub node_timeout_ms: u64,
}

impl WorkerConfig {
    /// The lock and lease TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// This process's random numbers: the run's seed mixed with its index and its pid (a
    /// worker started again after a kill draws anew).
    pub fn process_rng(&self) -> StdRng {
        let pid = u64::from(std::process::id());
        StdRng::seed_from_u64(self.seed ^ (self.id as u64) << 32 ^ pid)
    }
}

/// The store connection, which reconnects once when a call fails.
#[derive(Debug)]
pub struct Reporter {
    addr: SocketAddr,
    client: Option<Client>,
    /// The process's index.
    pub worker: usize,
}

impl Reporter {
    /// Connects to the store.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    pub async fn connect(addr: SocketAddr, worker: usize) -> std::io::Result<Self> {
        Ok(Self {
            addr,
            client: Some(Client::connect(addr).await?),
            worker,
        })
    }

    /// A request of `kind` from this process, stamped now.
    pub fn request(&self, kind: Kind) -> Request {
        Request::new(kind, self.worker)
    }

    /// A request of `kind` about claim `claim` on `resources` under `token`, stamped now.
    pub fn about(
        &self,
        kind: Kind,
        claim: u64,
        resources: &[String],
        token: Option<u64>,
    ) -> Request {
        let mut req = self.request(kind);
        req.claim = claim;
        req.resources = resources.to_vec();
        req.token = token;
        req
    }

    /// Reports claim `claim` refused (`note`: the error).
    pub async fn refused(&mut self, claim: u64, resources: &[String], note: String) {
        let mut refused = self.about(Kind::Refused, claim, resources, None);
        refused.note = note;
        self.send(&refused).await;
    }

    /// A grant of claim `claim` on `resources` with `token`, whose call began at `call_ns`,
    /// with `remaining` validity read just now (see [`valid_until_ns`]).
    pub fn grant(
        &self,
        claim: u64,
        resources: &[String],
        token: u64,
        call_ns: u64,
        remaining: Duration,
    ) -> Request {
        let (at, until) = valid_until_ns(remaining);
        let mut grant = self.about(Kind::Grant, claim, resources, Some(token));
        grant.at_ns = at;
        grant.call_ns = call_ns;
        grant.valid_until_ns = Some(until);
        grant
    }

    /// Writes to `resource` under claim `claim` and `token`, with the validity checked
    /// before it (`(at_ns, valid_until_ns)`, none for a write made without a check);
    /// whether the store accepted it.
    pub async fn write(
        &mut self,
        claim: u64,
        resource: &str,
        token: u64,
        checked: Option<(u64, u64)>,
    ) -> bool {
        self.access(Kind::Write, claim, resource, token, checked)
            .await
    }

    /// A [`write`](Self::write), or a read (`kind`), of `resource`.
    pub async fn access(
        &mut self,
        kind: Kind,
        claim: u64,
        resource: &str,
        token: u64,
        checked: Option<(u64, u64)>,
    ) -> bool {
        let mut access = self.about(kind, claim, &[resource.to_string()], Some(token));
        if let Some((at, until)) = checked {
            access.at_ns = at;
            access.valid_until_ns = Some(until);
        }
        self.send(&access).await
    }

    /// Reports that this process stopped believing it holds claim `claim` (`note`: why).
    pub async fn end(&mut self, claim: u64, resources: &[String], token: u64, note: String) {
        let mut end = self.about(Kind::End, claim, resources, Some(token));
        end.note = note;
        self.send(&end).await;
    }

    /// Sends `req`; whether the store accepted it (`false` when it could not be reached).
    pub async fn send(&mut self, req: &Request) -> bool {
        for _ in 0..2 {
            if self.client.is_none() {
                self.client = Client::connect(self.addr).await.ok();
            }
            let Some(client) = self.client.as_mut() else {
                continue;
            };
            match client.call(req).await {
                Ok(r) => return r.accepted,
                Err(_) => self.client = None,
            }
        }
        false
    }
}

/// `remaining` mapped onto this host's monotonic clock: read it first, then the clock.
pub fn valid_until_ns(remaining: Duration) -> (u64, u64) {
    let remaining = u64::try_from(remaining.as_nanos()).unwrap_or(u64::MAX);
    let now = now_ns();
    (now, now.saturating_add(remaining))
}

/// Runs the process until it is killed.
///
/// # Errors
///
/// A bad configuration, or a store that cannot be reached.
pub async fn run(cfg: WorkerConfig) -> Result<(), Box<dyn std::error::Error>> {
    let locks = match cfg.mutant {
        Some(m @ (Mutant::SemaphoreExtraPermit | Mutant::RwReaderMissesWriter)) => {
            library_mutant(&cfg, m).await?
        }
        _ => {
            process_env::worker_manager(
                cfg.nodes.clone(),
                Duration::from_millis(cfg.node_timeout_ms),
                Duration::from_millis(cfg.max_ttl_ms),
            )
            .await?
        }
    };
    let mut reporter = Reporter::connect(cfg.store, cfg.id).await?;
    let ready = reporter.request(Kind::Ready);
    reporter.send(&ready).await;
    match (cfg.role, cfg.kind) {
        (Role::Observer, _) => observe(&locks, &mut reporter).await,
        (Role::Worker, WorkloadKind::Election) => {
            super::election::run(&locks, &cfg, &mut reporter).await
        }
        (Role::Worker, WorkloadKind::LockAll) => {
            super::lock_all::run(&locks, &cfg, &mut reporter).await
        }
        (Role::Worker, WorkloadKind::Semaphore) => {
            super::semaphore::run(&locks, &cfg, &mut reporter).await
        }
        (Role::Worker, WorkloadKind::RwLock) => {
            super::rw_lock::run(&locks, &cfg, &mut reporter).await
        }
    }
}

/// The worker's manager on the broken library that `mutant` names.
#[cfg(quorumlock_mutants)]
async fn library_mutant(
    cfg: &WorkerConfig,
    mutant: Mutant,
) -> Result<Redlock, Box<dyn std::error::Error>> {
    let broken = match mutant {
        Mutant::SemaphoreExtraPermit => quorumlock::Mutant::SemaphoreExtraPermit,
        Mutant::RwReaderMissesWriter => quorumlock::Mutant::ReaderMissesWriter,
        other => return Err(format!("{other:?} is not a library mutant").into()),
    };
    let locks =
        process_env::fenced_manager(cfg.nodes.clone(), Duration::from_millis(cfg.max_ttl_ms))
            .node_timeout(Duration::from_millis(cfg.node_timeout_ms))
            .mutant(broken)
            .build()?
            .fenced();
    let _ = locks.connect().await;
    Ok(locks)
}

/// Without the mutants flag the library mutants do not exist.
#[cfg(not(quorumlock_mutants))]
async fn library_mutant(
    _: &WorkerConfig,
    _: Mutant,
) -> Result<Redlock, Box<dyn std::error::Error>> {
    Err(
        "library mutants need jepsen-lite built with RUSTFLAGS=\"--cfg quorumlock_mutants\" \
         (scripts/jepsen.sh builds it so)"
            .into(),
    )
}

/// Reports every item of the election's observer stream.
async fn observe(
    locks: &Redlock,
    reporter: &mut Reporter,
) -> Result<(), Box<dyn std::error::Error>> {
    use futures::StreamExt;
    let mut stream = locks.election(super::ELECTION).observe()?;
    while let Some(item) = stream.next().await {
        let mut req = reporter.request(Kind::Observed);
        req.resources = vec![super::ELECTION.to_string()];
        if let Some(leader) = item {
            req.identity = leader.identity().to_string();
            req.token = Some(leader.fence());
        }
        reporter.send(&req).await;
    }
    Ok(())
}
