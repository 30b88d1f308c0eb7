//! The scenario catalog: what each run does and what it must show.
//!
//! "hold" means zero claim overlaps, zero interleaved effects and zero lost updates on the
//! unfenced register, no orphan key outliving its TTL, and an acquisition soon after the heal.
//! "break" means at least one violation: the targeted ones are scripted through the proxy so
//! that they break every time, not by luck.

use quorumlock::testing::Persistence;
use serde::Serialize;

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

/// A composed random run on `nodes` masters, fencing and restart protection on (must hold) or
/// off (`soak --unprotected`, which reports the violation rate: how often it breaks depends on
/// how often a paused client's access lands on the register).
pub fn composed(name: &'static str, nodes: usize, protected: bool) -> Scenario {
    Scenario {
        about: if protected {
            "composed random faults, 6 clients, 6 resources, mixed acquisitions; fencing and restart protection on"
        } else {
            "composed random faults, 6 clients, 6 resources, mixed acquisitions; fencing and restart protection off"
        },
        clients: 6,
        nodes,
        fenced: protected,
        protection: protected,
        quick: false,
        ..base(name, "composed", Expect::Hold, Script::Composed)
    }
}

/// Every scenario, in table order.
pub fn catalog() -> Vec<Scenario> {
    use Expect::{Break, Hold};
    let mut v = vec![
        Scenario {
            about: "no faults, 3 clients looping",
            clients: 3,
            ..base("no-faults", "none", Hold, Script::Random(RandomFault::None))
        },
        Scenario {
            about: "each client cut from 2 random nodes (blackhole/reset), on and off",
            clients: 3,
            ..base(
                "minority-partition",
                "partition",
                Hold,
                Script::Random(RandomFault::MinorityPartition),
            )
        },
        Scenario {
            about: "5 clients, client i reaches only nodes i..i+2 (mod 5), on and off",
            clients: 5,
            ..base(
                "majorities-ring",
                "partition",
                Hold,
                Script::Random(RandomFault::MajoritiesRing),
            )
        },
        Scenario {
            about: "A reaches only {0,1}, B only {2,3,4}",
            ..base("split-minority", "partition", Hold, Script::SplitMinority)
        },
        Scenario {
            about: "one random node SIGSTOPped, on and off",
            clients: 3,
            ..base(
                "node-pause",
                "pause",
                Hold,
                Script::Random(RandomFault::NodePause),
            )
        },
        Scenario {
            about:
                "A's replies held for TTL+500ms (node timeout 3 s): late quorum leaves no validity",
            node_timeout_ms: 3000,
            retry_delay_ms: 5,
            ..base("held-replies", "delay", Hold, Script::HeldReplies)
        },
        Scenario {
            about:
                "A SIGSTOPs itself after its last validity check, for TTL+300ms; unfenced register",
            ..base("client-pause", "client pause", Break, Script::ClientPause)
        },
        Scenario {
            about: "A's critical section outlasts the TTL, no extension, no check",
            ..base("slow-cs", "slow client", Break, Script::SlowCs)
        },
        Scenario {
            about: "A holds {0,1,2}; node 2 SIGKILLed and restarted empty at once; B takes {2,3,4}",
            ttl_ms: 6000,
            ..base(
                "crash-restart-empty",
                "crash",
                Break,
                Script::Crash(Restart::ImmediateEmpty),
            )
        },
        Scenario {
            about: "as crash-restart-empty, but node 2 restarts empty after TTL+drift+500ms while B polls",
            ttl_ms: 4000,
            ..base(
                "crash-restart-delayed",
                "crash",
                Hold,
                Script::Crash(Restart::DelayedEmpty),
            )
        },
        Scenario {
            about: "as crash-restart-empty, but appendfsync always and a plain restart",
            ttl_ms: 4000,
            persistence: Persistence::AofAlways,
            ..base(
                "crash-restart-fsync-always",
                "crash",
                Hold,
                Script::Crash(Restart::Immediate),
            )
        },
        Scenario {
            about: "as crash-restart-empty, appendfsync everysec, power loss (AOF tail truncated)",
            ttl_ms: 4000,
            persistence: Persistence::AofEverySec,
            ..base(
                "crash-power-loss-everysec",
                "crash",
                Break,
                Script::Crash(Restart::PowerLoss),
            )
        },
        Scenario {
            about: "as crash-restart-empty, but node 2 reloads an RDB snapshot older than the lock",
            ttl_ms: 4000,
            ..base(
                "crash-restart-snapshot",
                "crash",
                Break,
                Script::Crash(Restart::Snapshot),
            )
        },
        Scenario {
            about: "as crash-restart-fsync-always, but node 2 is restored from a backup of its AOF taken before the lock",
            ttl_ms: 4000,
            persistence: Persistence::AofAlways,
            ..base(
                "crash-restored-backup",
                "crash",
                Break,
                Script::Crash(Restart::RestoredBackup),
            )
        },
        Scenario {
            about:
                "as crash-power-loss-everysec, but a plain SIGKILL: the page cache keeps the key",
            ttl_ms: 4000,
            persistence: Persistence::AofEverySec,
            quick: false,
            ..base(
                "crash-sigkill-everysec",
                "crash",
                Hold,
                Script::Crash(Restart::Immediate),
            )
        },
        Scenario {
            about: "requests of each client to 1-2 random nodes delayed 0.1-3 s, on and off",
            clients: 3,
            quick: false,
            ..base(
                "slow-links",
                "delay",
                Hold,
                Script::Random(RandomFault::SlowLinks),
            )
        },
        Scenario {
            about:
                "iptables DROP to one random node's port for 1-3 s: late TCP delivery after heal",
            clients: 3,
            quick: false,
            ..base(
                "kernel-partition",
                "partition",
                Hold,
                Script::Random(RandomFault::KernelDrop),
            )
        },
        Scenario {
            about: "iptables statistic drops 20% of packets to/from every node port, on and off",
            clients: 3,
            quick: false,
            ..base(
                "packet-loss",
                "loss",
                Hold,
                Script::Random(RandomFault::PacketLoss),
            )
        },
        Scenario {
            about: "A holds {0,1,2}; node 2's wall clock jumps forward 2*TTL; B takes {2,3,4}",
            ttl_ms: 4000,
            ..base(
                "clock-jump-forward",
                "clock",
                Break,
                Script::ClockJump(8000),
            )
        },
        Scenario {
            about: "A holds {0,1,2}; node 2's wall clock jumps back 2*TTL; B tries {2,3,4}",
            ttl_ms: 4000,
            ..base("clock-jump-back", "clock", Hold, Script::ClockJump(-8000))
        },
        Scenario {
            about:
                "all node clocks 0.9% fast (< the 1% drift allowance); B polls as A's keys expire",
            ttl_ms: 8000,
            retry_delay_ms: 2,
            ..base(
                "clock-fast-within-drift",
                "clock",
                Hold,
                Script::ClockRate(9000),
            )
        },
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
        Scenario {
            about: "A's lease runs out, B acquires, A releases late (compare-and-delete); C tries",
            clients: 3,
            ..base("late-release", "slow client", Hold, Script::LateRelease)
        },
        Scenario {
            about: "A holds all five; its keys vanish on 3 nodes; A's extend must be refused",
            ttl_ms: 4000,
            ..base(
                "extend-after-expiry",
                "extend",
                Hold,
                Script::ExtendAfterExpiry,
            )
        },
    ];
    v.extend([
        Scenario {
            about: "as crash-restart-empty, with restart protection: node 2 sits out one max TTL",
            ttl_ms: 4000,
            protection: true,
            ..base(
                "crash-restart-empty-protected",
                "crash",
                Hold,
                Script::Crash(Restart::ImmediateEmpty),
            )
        },
        Scenario {
            about: "as crash-restart-snapshot, with restart protection: node 2 sits out one max TTL",
            ttl_ms: 4000,
            protection: true,
            ..base(
                "crash-restart-snapshot-protected",
                "crash",
                Hold,
                Script::Crash(Restart::Snapshot),
            )
        },
        Scenario {
            about:
                "as crash-power-loss-everysec, with restart protection: node 2 sits out one max TTL",
            ttl_ms: 4000,
            persistence: Persistence::AofEverySec,
            protection: true,
            ..base(
                "crash-power-loss-protected",
                "crash",
                Hold,
                Script::Crash(Restart::PowerLoss),
            )
        },
        Scenario {
            about: "as crash-restored-backup, with restart protection: the durable node 2 sits out one max TTL",
            ttl_ms: 4000,
            persistence: Persistence::AofAlways,
            protection: true,
            ..base(
                "crash-restored-backup-protected",
                "crash",
                Hold,
                Script::Crash(Restart::RestoredBackup),
            )
        },
        Scenario {
            about: "as slow-cs, but A's lock is kept alive by a lease (auto-extension)",
            keep_alive: true,
            ..base("slow-cs-keepalive", "slow client", Hold, Script::SlowCs)
        },
        Scenario {
            about: "as client-pause, with a lease: the pause stalls the renewals too",
            keep_alive: true,
            quick: false,
            ..base(
                "client-pause-keepalive",
                "client pause",
                Break,
                Script::ClientPause,
            )
        },
    ]);
    v.extend([
        composed("composed-n1", 1, true),
        composed("composed-n3", 3, true),
        composed("composed-n5", 5, true),
        composed("composed-n7", 7, true),
        Scenario {
            name: "composed-quick",
            quick: true,
            duration_s: Some(30),
            ..composed("composed-quick", 5, true)
        },
    ]);
    // Fencing: the breaking scenarios again, with tokens checked by the resource.
    let fenced = [
        ("client-pause-fenced", "client-pause", true),
        ("slow-cs-fenced", "slow-cs", false),
        ("crash-restart-empty-fenced", "crash-restart-empty", true),
        (
            "crash-power-loss-fenced",
            "crash-power-loss-everysec",
            false,
        ),
        ("clock-jump-forward-fenced", "clock-jump-forward", true),
    ];
    for (name, from, quick) in fenced {
        if let Some(s) = v.iter().find(|s| s.name == from).cloned() {
            v.push(Scenario {
                name,
                expect: Expect::Caught,
                about: "the same, with fencing tokens checked by the resource",
                fenced: true,
                quick,
                ..s
            });
        }
    }
    // Each mutant must be caught by a scenario the correct library passes.
    // The delayed restart must be what keeps crash-restart-delayed safe: without the delay it
    // breaks.
    if let Some(s) = v
        .iter()
        .find(|s| s.name == "crash-restart-delayed")
        .cloned()
    {
        v.push(Scenario {
            name: "mutant-restart-at-once",
            kind: "mutant",
            expect: Expect::Break,
            about: "crash-restart-delayed with the restart at once: must break",
            script: Script::Crash(Restart::UndelayedEmpty),
            ..s
        });
    }
    let mutants = [
        (
            "mutant-no-elapsed-check",
            "held-replies",
            "no-elapsed-check",
        ),
        ("mutant-grant-exhausted", "held-replies", "grant-exhausted"),
        ("mutant-zero-drift", "clock-fast-within-drift", "zero-drift"),
        (
            "mutant-minority-quorum",
            "split-minority",
            "minority-quorum",
        ),
        (
            "mutant-plain-del-release",
            "late-release",
            "plain-del-release",
        ),
        (
            "mutant-extend-recreates",
            "extend-after-expiry",
            "extend-recreates",
        ),
    ];
    for (name, from, mutation) in mutants {
        if let Some(s) = v.iter().find(|s| s.name == from).cloned() {
            v.push(Scenario {
                name,
                kind: "mutant",
                expect: Expect::Break,
                about: "the scenario above against a deliberately broken library",
                mutation: Some(mutation),
                ..s
            });
        }
    }
    v
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
