//! The scenario catalog: what each run does and what it must show. Each family of scripted
//! scenarios has its file, with its catalog entries and its script: `links.rs` (a split into
//! minorities, held replies), `client.rs` (a client that pauses, works past its TTL or releases
//! late), `crash.rs`, `clock.rs` and `extend.rs`; `random_runs.rs` lists the random and
//! composed runs, which [`crate::random`] plays. [`play`] runs a scripted one.
//!
//! "hold" means zero claim overlaps, zero interleaved effects and zero lost updates on the
//! unfenced register, no orphan key outliving its TTL, and an acquisition soon after the heal.
//! "break" means at least one violation: the targeted ones are scripted through the proxy so
//! that they break every time, not by luck.

mod client;
mod clock;
mod crash;
mod extend;
mod links;
mod play;
mod random_runs;

use quorumlock_testkit::Persistence;
use serde::Serialize;

pub use play::play;
pub use random_runs::composed;

/// What the scenario must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Mutual exclusion holds.
    Hold,
    /// Mutual exclusion breaks (outside Redlock's model, or a mutant).
    Break,
    /// It breaks, and the fenced register rejects every stale access: nothing acknowledged is
    /// lost, at least one access is rejected, tokens grow between disjoint claims.
    Caught,
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Hold => "hold",
            Self::Break => "break",
            Self::Caught => "caught",
        })
    }
}

/// Faults of the random (free-running) scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RandomFault {
    /// None.
    None,
    /// Each client loses two random nodes (blackhole or reset), on and off.
    MinorityPartition,
    /// One random node is paused (`SIGSTOP`), on and off.
    NodePause,
    /// Each client's requests to one or two random nodes are delayed 0.1–3 s, past its give-up.
    SlowLinks,
    /// A kernel partition: `iptables` drops packets to one random node's port for 0.5–3 s;
    /// TCP retransmits the requests after the heal and the node applies them late.
    KernelDrop,
    /// Per-client majorities ring: client i reaches nodes i, i+1, i+2 (mod 5) and is cut
    /// (blackhole or reset) from the other two, on and off. Every client can form a quorum,
    /// each with a different majority.
    MajoritiesRing,
    /// `iptables` `statistic` drops 20% of the loopback packets to and from every node port,
    /// on and off: loss below TCP, so TCP retransmits (never bytes dropped in the proxy).
    PacketLoss,
}

/// How a node comes back after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Restart {
    /// At once, with whatever its persistence kept.
    Immediate,
    /// At once, with its data directory wiped.
    ImmediateEmpty,
    /// Empty, after more than the TTL; B polls from the crash on, so only the delay keeps it
    /// from a quorum while A holds.
    DelayedEmpty,
    /// The mutant of [`DelayedEmpty`](Self::DelayedEmpty): the same run, but the node restarts
    /// empty at once while B polls. Must break, or the delayed run proves nothing.
    UndelayedEmpty,
    /// At once, after truncating the AOF to its size before the lock was taken: a power loss
    /// that took the last, not yet fsynced, second of writes.
    PowerLoss,
    /// At once, reloading an RDB snapshot taken (`SAVE`) before the lock was granted: Redis's
    /// default persistence after a crash. The epoch marker is in the snapshot.
    Snapshot,
    /// At once, restored from a copy of its persistence files taken aside before the lock was
    /// granted: an operator's restore from a backup. The copy holds the epoch marker and the
    /// provisioning record; with `appendfsync always` nothing else tells it from a plain
    /// restart.
    RestoredBackup,
}

/// The script of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Script {
    /// Clients loop on their own while a seeded nemesis injects faults.
    Random(RandomFault),
    /// Clients loop on several resources with a mix of acquisitions, pausing themselves after
    /// a grant and crashing while holding now and then, while the generator composes faults of
    /// every kind (see [`crate::generator`]).
    Composed,
    /// A pauses itself (`SIGSTOP`) after its last validity check, past the TTL; B runs.
    ClientPause,
    /// A's critical section outlasts the TTL, without any check; B runs meanwhile.
    SlowCs,
    /// A holds {0,1,2} (cut from 3,4); node 2 crashes and restarts; B (cut from 0,1) tries.
    Crash(Restart),
    /// A holds {0,1,2}; node 2's wall clock jumps by this many ms; B (cut from 0,1) tries.
    ClockJump(i64),
    /// Every node's clock runs fast by this many ppm; A holds without releasing; B polls.
    ClockRate(i64),
    /// A reaches only {0,1}, B only {2,3,4}; both try at once.
    SplitMinority,
    /// A's replies are held longer than the TTL (long node timeout); B polls afterwards.
    HeldReplies,
    /// A's lease runs out, B acquires, A releases late; C then tries while B holds.
    LateRelease,
    /// A holds all five; its keys vanish on three nodes; A extends.
    ExtendAfterExpiry,
}

/// One scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Name for `--scenario`.
    pub name: &'static str,
    /// Fault kind, for the table.
    pub kind: &'static str,
    /// What it must show.
    pub expect: Expect,
    /// In `matrix --quick`.
    pub quick: bool,
    /// One line for the report.
    pub about: &'static str,
    /// What the masters keep on disk.
    #[serde(skip)]
    pub persistence: Persistence,
    /// Lock TTL.
    pub ttl_ms: u64,
    /// Client processes.
    pub clients: usize,
    /// Per-node timeout.
    pub node_timeout_ms: u64,
    /// Retry jitter bound.
    pub retry_delay_ms: u64,
    /// A library mutant by name.
    pub mutation: Option<&'static str>,
    /// Clients take fencing tokens and use the fenced register.
    pub fenced: bool,
    /// Clients run with restart protection (max TTL = TTL).
    pub protection: bool,
    /// Scripted holders keep their lock alive with a lease (auto-extension).
    pub keep_alive: bool,
    /// Masters.
    pub nodes: usize,
    /// The run's length, when the scenario fixes it (else the matrix's or `--duration`).
    pub duration_s: Option<u64>,
    /// What happens.
    pub script: Script,
}

const fn base(name: &'static str, kind: &'static str, expect: Expect, script: Script) -> Scenario {
    Scenario {
        name,
        kind,
        expect,
        quick: true,
        about: "",
        persistence: Persistence::None,
        ttl_ms: 2000,
        clients: 2,
        node_timeout_ms: 50,
        retry_delay_ms: 50,
        mutation: None,
        fenced: false,
        protection: false,
        keep_alive: false,
        nodes: 5,
        duration_s: None,
        script,
    }
}

/// Every scenario, in table order: family by family, each with its variants (with a lease,
/// with fencing, with restart protection, against a library mutant).
pub fn catalog() -> Vec<Scenario> {
    [
        random_runs::entries(),
        links::entries(),
        client::entries(),
        crash::entries(),
        clock::entries(),
        extend::entries(),
        random_runs::composed_entries(),
    ]
    .concat()
}

/// `s` with fencing tokens checked by the resource: the fault must be caught.
fn fenced(s: &Scenario, name: &'static str, quick: bool) -> Scenario {
    Scenario {
        name,
        expect: Expect::Caught,
        about: "the same, with fencing tokens checked by the resource",
        fenced: true,
        quick,
        ..s.clone()
    }
}

/// `s` against the library mutant `mutation`: the correct library passes `s`, so the mutant
/// must break it.
fn mutant(s: &Scenario, name: &'static str, mutation: &'static str) -> Scenario {
    Scenario {
        name,
        kind: "mutant",
        expect: Expect::Break,
        about: "the scenario above against a deliberately broken library",
        mutation: Some(mutation),
        ..s.clone()
    }
}

/// The library mutants the composed nemesis hunts (`soak --mutation NAME`), by name.
pub const COMPOSED_MUTANTS: [&str; 10] = [
    "clock-after-first-reply",
    "late-extend",
    "min-token",
    "skip-write-back",
    "quarantine-ignored",
    "no-cleanup",
    "reuse-after-timeout",
    "extend-from-quorum",
    "grant-exhausted",
    "no-cleanup-when-degraded",
];

/// Why this build cannot run library mutant `mutation`, if it cannot: the mutants exist only
/// in a build with `--cfg quorumlock_mutants`, and a client of another build refuses them.
/// `how` is the command that runs it from such a build.
pub fn mutants_missing(mutation: &str, how: &str) -> Option<String> {
    (!cfg!(quorumlock_mutants)).then(|| {
        format!(
            "the library mutant {mutation:?} is not in this build of jepsen-lite (built without \
             RUSTFLAGS=\"--cfg quorumlock_mutants\"); run it with `{how}`, which builds with it"
        )
    })
}

/// What a scenario demands of a run before its observation counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minimum {
    /// Granted claims, over all clients.
    pub claims: usize,
    /// Faults shown to take effect.
    pub faults: usize,
}

impl Scenario {
    /// Why this build cannot run the scenario, if it runs a library mutant the build lacks
    /// (see [`mutants_missing`]).
    pub fn mutant_unavailable(&self) -> Option<String> {
        let how = format!("scripts/jepsen.sh run --scenario {}", self.name);
        self.mutation.and_then(|m| mutants_missing(m, &how))
    }

    /// The resources its clients lock (a composed run uses twelve; the register is protected
    /// by the first). A composed run's grants are bounded by how fast each resource changes
    /// hands, not by the CPU (a 30-minute soak on six resources kept the 1-minute load near
    /// 0.3–1 on two cores): twelve give its 24 client loops two each.
    pub fn resources(&self) -> Vec<String> {
        match self.script {
            Script::Composed => std::iter::once("r".to_string())
                .chain((1..12).map(|i| format!("r{i}")))
                .collect(),
            _ => vec!["r".to_string()],
        }
    }

    /// Whether its masters each keep their own persistence (a composed run: every restart
    /// kind needs a master it fits).
    pub fn mixed_persistence(&self) -> bool {
        self.script == Script::Composed
    }

    /// What the claims checker alone must show, where the scenario decides it (`None`: either).
    ///
    /// A client that pauses or works past its lock's validity breaks mutual exclusion only by
    /// its *effects*: its claims (what it was told it held) must not overlap, or the break is a
    /// library bug rather than the fault. Outside Redlock's model (a master forgetting a lock,
    /// a clock running fast or jumping forward) the claims themselves overlap. Mutants and the
    /// fenced variants are judged by the overall expectation only.
    pub fn expect_claims(&self) -> Option<Expect> {
        if self.mutation.is_some() || self.kind == "mutant" || self.script == Script::Composed {
            // A composed run judges its claims itself: overlaps only where a clock fault
            // (outside Redlock's model) explains them.
            return None;
        }
        match (self.script, self.expect) {
            (Script::ClientPause | Script::SlowCs, _) | (_, Expect::Hold) => Some(Expect::Hold),
            (_, Expect::Caught) => None,
            (Script::Crash(_) | Script::ClockJump(_) | Script::ClockRate(_), Expect::Break) => {
                Some(Expect::Break)
            }
            _ => None,
        }
    }

    /// What a run must show before its observation counts (see [`crate::verdict`]): granted
    /// claims, and faults shown to take effect. Random runs need ten claims (the quick matrix's
    /// shortest runs see dozens) and, but for `no-faults`, one proven fault; scripted runs need
    /// their two holders' claims and the fault they script.
    pub fn minimum(&self) -> Minimum {
        let (claims, faults) = match self.script {
            Script::Random(RandomFault::None) => (10, 0),
            Script::Random(_) => (10, 1),
            // Composed runs are long and busy: dozens of grants, several proven faults.
            Script::Composed => (50, 3),
            // No injected fault: the client itself is slow or late, or the keys are deleted by
            // hand.
            Script::SlowCs | Script::LateRelease | Script::ExtendAfterExpiry => (2, 0),
            _ => (2, 1),
        };
        Minimum { claims, faults }
    }
}

/// A scenario by name.
pub fn find(name: &str) -> Option<Scenario> {
    catalog().into_iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A build without the mutants says so, and how to run the mutant, instead of starting
    /// clients that refuse it; a scenario without a library mutant runs in any build.
    #[test]
    fn a_mutant_scenario_names_the_missing_build_flag() {
        let mutant = find("mutant-zero-drift").expect("scenario");
        let why = mutant.mutant_unavailable();
        if cfg!(quorumlock_mutants) {
            assert_eq!(why, None);
        } else {
            let why = why.expect("unavailable without the flag");
            assert!(why.contains("--cfg quorumlock_mutants"), "{why}");
            assert!(
                why.contains("scripts/jepsen.sh run --scenario mutant-zero-drift"),
                "{why}"
            );
        }
        for plain in ["crash-restored-backup", "mutant-restart-at-once"] {
            assert_eq!(find(plain).expect("scenario").mutant_unavailable(), None);
        }
    }
}
