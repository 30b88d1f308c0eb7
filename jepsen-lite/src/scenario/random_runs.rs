//! The random scenarios: clients loop on their own while a seeded nemesis injects one kind of
//! fault, on and off ([`crate::random`] plays them); and the composed runs, where the generator
//! composes faults of every kind.

use super::{base, Expect::Hold, RandomFault, Scenario, Script};

/// The random scenarios with one kind of fault, in table order.
pub(super) fn entries() -> Vec<Scenario> {
    vec![
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
    ]
}

/// The composed runs on 1, 3, 5 and 7 masters, and the quick one.
pub(super) fn composed_entries() -> Vec<Scenario> {
    vec![
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
    ]
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
        ..base(name, "composed", Hold, Script::Composed)
    }
}
