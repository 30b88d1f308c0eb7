//! Fault bands: which fault was on, on which node or link, from when to when, read from the
//! nemesis events of the history, and the text and colour each band is drawn with.

use serde_json::Value;

use crate::history::{Event, Process};
use crate::nemesis::Verb;

/// One fault on the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// When it was put on (host monotonic ns).
    pub start_ns: u64,
    /// When it was lifted, or the end of the history; equal to the start for a one-off event
    /// (a client crash, a snapshot, a restart).
    pub end_ns: u64,
    /// Its verb.
    pub verb: Verb,
    /// The fault and its target (`pause node 2`).
    pub label: String,
}

/// The fault bands of a history: each fault from its nemesis event to the event that lifts
/// it (the resume of the same node or client, the restart of the same node, the release of held
/// replies, or the end of the step or the heal, which lift everything), or `end_ns`. Events
/// that lift nothing and start nothing (a restart with no kill before it, a snapshot, a client
/// crash) are one-off bands.
pub fn bands(events: &[Event], end_ns: u64) -> Vec<Band> {
    let mut nemesis: Vec<&Event> = events
        .iter()
        .filter(|e| e.process == Process::nemesis())
        .collect();
    nemesis.sort_by_key(|e| e.time_ns);
    let mut done: Vec<Band> = Vec::new();
    // Open bands and what they target (node or client), to pair them with what lifts them.
    let mut open: Vec<(Band, Option<Target>)> = Vec::new();
    for e in nemesis {
        let Some(verb) = Verb::parse(&e.f) else {
            continue;
        };
        let at = e.time_ns;
        let lifts = |band: &Band, target: &Option<Target>| match verb {
            Verb::PartitionEnd | Verb::Heal => true,
            Verb::Resume => band.verb == Verb::Pause && *target == target_of(e),
            Verb::ResumeClient => band.verb == Verb::PauseClient && *target == target_of(e),
            Verb::Restart => band.verb == Verb::Kill && *target == target_of(e),
            Verb::Release => band.verb == Verb::Hold,
            _ => false,
        };
        let before = open.len();
        let mut still = Vec::with_capacity(open.len());
        for (mut band, target) in open {
            if lifts(&band, &target) {
                band.end_ns = at.max(band.start_ns);
                done.push(band);
            } else {
                still.push((band, target));
            }
        }
        let lifted = before - still.len();
        open = still;
        if verb.starts_fault() {
            open.push((
                Band {
                    start_ns: at,
                    end_ns: at,
                    verb,
                    label: fault_label(verb, &e.value),
                },
                target_of(e),
            ));
        } else {
            // A restart that ended a crash band is already the end of that band.
            let ended_a_crash = verb == Verb::Restart && lifted > 0;
            if verb.ends_band() || verb.ends_all() || ended_a_crash {
                continue;
            }
            // A one-off: drawn as a thin band of its own.
            done.push(Band {
                start_ns: at,
                end_ns: at,
                verb,
                label: fault_label(verb, &e.value),
            });
        }
    }
    for (mut band, _) in open {
        band.end_ns = end_ns.max(band.start_ns);
        done.push(band);
    }
    done.sort_by_key(|b| (b.start_ns, b.end_ns));
    done
}

/// What a fault acts on, to pair it with what lifts it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Node(u64),
    Client(u64),
}

fn target_of(e: &Event) -> Option<Target> {
    e.u64_field("node")
        .map(Target::Node)
        .or_else(|| e.u64_field("client").map(Target::Client))
}

/// The label of a fault: its verb and target, with what says how much (`pause node 2`,
/// `partition clients 0-5 from node 4 (requests, blackhole)`, `delay 2759 ms clients 0-5 to
/// node 3`), from the nemesis event's value. Unknown fields are left out; a value with no
/// target gives the verb alone.
pub fn fault_label(verb: Verb, value: &Value) -> String {
    let clients = value.get("clients").map(list);
    let nodes = value
        .get("node")
        .map(|n| format!("node {}", list(n)))
        .or_else(|| {
            value.get("nodes").map(|n| match n {
                Value::Array(a) if a.len() == 1 => format!("node {}", list(n)),
                Value::String(s) if s == "all" => "every node".to_string(),
                _ => format!("nodes {}", list(n)),
            })
        });
    let num = |field: &str| value.get(field).and_then(Value::as_i64);
    let text = |field: &str| value.get(field).and_then(Value::as_str);
    let client = value.get("client").map(|c| format!("client {}", list(c)));
    let who = |prefix: &str| {
        clients.as_ref().map(|c| match c.as_str() {
            "all" => format!("{prefix}every client"),
            c => format!("{prefix}clients {c}"),
        })
    };
    let mut parts: Vec<String> = Vec::new();
    match verb {
        Verb::Partition => {
            if value.get("ring").is_some() {
                parts.push("majorities ring".to_string());
            } else {
                parts.push("partition".to_string());
                let cut = who("");
                let from = if cut.is_some() { "from " } else { "" };
                parts.extend(cut);
                parts.extend(nodes.map(|n| format!("{from}{n}")));
            }
            let mut how: Vec<String> = Vec::new();
            how.extend(text("path").map(|p| format!("{p} only")));
            how.extend(text("mode").map(str::to_string));
            how.extend(text("how").map(str::to_string));
            how.extend(num("for_ms").map(|ms| format!("for {ms} ms")));
            if !how.is_empty() {
                parts.push(format!("({})", how.join(", ")));
            }
        }
        Verb::Hold => {
            parts.push("hold replies".to_string());
            parts.extend(who("to "));
            parts.extend(client.map(|c| format!("to {c}")));
            parts.extend(nodes.map(|n| format!("from {n}")));
        }
        Verb::Delay => {
            parts.push(match num("ms") {
                Some(ms) => format!("delay {ms} ms"),
                None => "delay".to_string(),
            });
            parts.extend(who(""));
            parts.extend(nodes.map(|n| format!("to {n}")));
        }
        Verb::Loss => {
            let p = value
                .get("probability")
                .and_then(|p| {
                    p.as_str()
                        .map(str::to_string)
                        .or_else(|| p.as_f64().map(|f| f.to_string()))
                })
                .and_then(|p| p.parse::<f64>().ok());
            parts.push(match p {
                Some(p) => format!("{:.0}% packet loss", p * 100.0),
                None => "packet loss".to_string(),
            });
            parts.extend(nodes.map(|n| format!("on {n}")));
        }
        Verb::ClockBump => {
            parts.push(match num("delta_ms") {
                Some(ms) => format!("clock {ms:+} ms"),
                None => "clock bump".to_string(),
            });
            parts.extend(nodes.map(|n| format!("on {n}")));
            if value.get("lagging").is_some() {
                parts.push(match num("cut_ms") {
                    Some(ms) => format!("(lagging: cut off {ms} ms first)"),
                    None => "(lagging)".to_string(),
                });
            }
        }
        Verb::ClockRate => {
            parts.push(match num("rate_ppm") {
                Some(ppm) => format!("clocks {ppm} ppm fast"),
                None => "clock rate".to_string(),
            });
            parts.extend(nodes.map(|n| format!("on {n}")));
        }
        Verb::ClockStrobe => {
            parts.push(match num("amplitude_ms") {
                Some(ms) => format!("clock strobe ±{ms} ms"),
                None => "clock strobe".to_string(),
            });
            parts.extend(nodes.map(|n| format!("on {n}")));
        }
        Verb::Kill => {
            parts.push("crash".to_string());
            parts.extend(nodes);
            parts.extend(
                text("restart")
                    .or_else(|| text("how"))
                    .map(|r| format!("(restart {})", restart_text(r))),
            );
        }
        Verb::Restart => {
            parts.push("restart".to_string());
            parts.extend(nodes);
            parts.extend(text("how").map(|r| format!("({})", restart_text(r))));
        }
        Verb::TruncateAof => {
            parts.push("AOF tail cut".to_string());
            parts.extend(nodes.map(|n| format!("on {n}")));
            parts.extend(num("bytes").map(|b| format!("(to {b} bytes)")));
        }
        Verb::CrashClient => {
            parts.push("crash".to_string());
            parts.extend(client);
            if value.get("restarted").and_then(Value::as_bool) == Some(true) {
                parts.push("(restarted)".to_string());
            }
        }
        Verb::PauseClient => {
            parts.push("pause".to_string());
            parts.extend(client);
            parts.extend(text("how").map(|h| format!("({h})")));
        }
        _ => {
            parts.push(verb.as_str().replace('-', " "));
            parts.extend(client);
            parts.extend(nodes);
        }
    }
    parts.join(" ")
}

/// A restart kind as the history spells it (`ImmediateEmpty`), in words.
fn restart_text(kind: &str) -> &str {
    match kind {
        "Immediate" => "at once, fsync always",
        "ImmediateEmpty" => "empty at once",
        "DelayedEmpty" => "empty after the TTL",
        "UndelayedEmpty" => "empty at once, mutant",
        "PowerLoss" => "AOF tail lost",
        "Snapshot" => "from RDB snapshot",
        "RestoredBackup" => "restored from an older backup",
        other => other,
    }
}

/// A number, a list of numbers (runs of consecutive ones shortened: `0-5`) or a string.
fn list(v: &Value) -> String {
    match v {
        Value::Array(items) => {
            let nums: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
            match nums {
                Some(nums) => ranges(&nums),
                None => items.iter().map(list).collect::<Vec<_>>().join(","),
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn ranges(nums: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        out.push(if j >= i + 2 {
            format!("{}-{}", nums[i], nums[j])
        } else if j == i + 1 {
            format!("{},{}", nums[i], nums[j])
        } else {
            nums[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// Jepsen's nemesis colours by kind of fault: crashes red, pauses blue, partitions and held
/// replies yellow, clocks cyan, the rest green.
pub fn colour(verb: Verb) -> &'static str {
    match verb {
        Verb::Kill
        | Verb::Restart
        | Verb::CrashClient
        | Verb::TruncateAof
        | Verb::SaveSnapshot
        | Verb::Backup => "#E9A4A0",
        Verb::Pause | Verb::PauseClient => "#A0B1E9",
        Verb::Partition | Verb::Hold => "#E9DCA0",
        Verb::ClockBump | Verb::ClockRate | Verb::ClockStrobe => "#A0E9E3",
        _ => "#D1E8A0",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Kind;
    use serde_json::json;

    fn nem(t: u64, verb: Verb, value: Value) -> Event {
        Event::at(t, Process::nemesis(), Kind::Info, verb.as_str(), value)
    }

    #[test]
    fn labels_name_the_fault_and_its_target() {
        let l = |verb, v| fault_label(verb, &v);
        assert_eq!(l(Verb::Pause, json!({"node": 2})), "pause node 2");
        assert_eq!(l(Verb::PauseClient, json!({"client": 0})), "pause client 0");
        assert_eq!(
            l(
                Verb::Partition,
                json!({"clients": [0,1,2,3,4,5], "mode": "blackhole", "nodes": [4], "path": "requests"})
            ),
            "partition clients 0-5 from node 4 (requests only, blackhole)"
        );
        assert_eq!(
            l(Verb::Partition, json!({"how": "iptables DROP", "node": 1})),
            "partition node 1 (iptables DROP)"
        );
        assert_eq!(
            l(
                Verb::Partition,
                json!({"clients": "all", "ring": true, "mode": "reset"})
            ),
            "majorities ring (reset)"
        );
        assert_eq!(
            l(
                Verb::Delay,
                json!({"clients": [0,1], "ms": 2759, "node": 3})
            ),
            "delay 2759 ms clients 0,1 to node 3"
        );
        assert_eq!(
            l(
                Verb::Loss,
                json!({"how": "iptables statistic", "nodes": "all", "probability": "0.2"})
            ),
            "20% packet loss on every node"
        );
        assert_eq!(
            l(Verb::ClockBump, json!({"node": 1, "delta_ms": -4000})),
            "clock -4000 ms on node 1"
        );
        assert_eq!(
            l(Verb::Kill, json!({"node": 0, "restart": "ImmediateEmpty"})),
            "crash node 0 (restart empty at once)"
        );
        assert_eq!(
            l(
                Verb::Hold,
                json!({"clients": [0], "direction": "to_client", "nodes": [2, 3]})
            ),
            "hold replies to clients 0 from nodes 2,3"
        );
        assert_eq!(
            l(Verb::ExpireKeys, json!({"nodes": [0, 1, 2], "key": "k"})),
            "expire keys nodes 0-2"
        );
    }

    #[test]
    fn odd_values_still_give_a_label() {
        assert_eq!(fault_label(Verb::Partition, &Value::Null), "partition");
        assert_eq!(
            fault_label(Verb::Pause, &json!({"node": "x"})),
            "pause node x"
        );
        assert_eq!(fault_label(Verb::ClockRate, &json!([1, 2])), "clock rate");
    }

    #[test]
    fn bands_end_where_their_own_fault_is_lifted() {
        let events = vec![
            nem(10, Verb::Pause, json!({"node": 2})),
            nem(12, Verb::Pause, json!({"node": 3})),
            nem(20, Verb::Resume, json!({"node": 3})),
            nem(
                25,
                Verb::Kill,
                json!({"node": 0, "restart": "ImmediateEmpty"}),
            ),
            nem(
                30,
                Verb::Restart,
                json!({"node": 0, "how": "ImmediateEmpty"}),
            ),
            nem(
                35,
                Verb::CrashClient,
                json!({"client": 1, "restarted": true}),
            ),
            nem(40, Verb::PartitionEnd, json!({})),
            nem(50, Verb::Loss, json!({"nodes": "all"})),
        ];
        let b = bands(&events, 60);
        let spans: Vec<(u64, u64, &str)> = b
            .iter()
            .map(|b| (b.start_ns, b.end_ns, b.label.as_str()))
            .collect();
        assert_eq!(
            spans,
            [
                (10, 40, "pause node 2"),
                (12, 20, "pause node 3"),
                (25, 30, "crash node 0 (restart empty at once)"),
                (35, 35, "crash client 1 (restarted)"),
                (50, 60, "packet loss on every node"),
            ]
        );
    }

    #[test]
    fn no_nemesis_no_bands() {
        assert!(bands(&[], 0).is_empty());
        let only_heal = [nem(5, Verb::Heal, json!({}))];
        assert!(bands(&only_heal, 10).is_empty());
    }
}
