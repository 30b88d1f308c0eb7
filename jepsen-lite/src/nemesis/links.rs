//! The faults the fault proxy puts on client–master links (a partition, a majorities ring, a
//! one-way cut, held replies, a delay to one master or to all): which links each sets to which
//! modes, and the proof, read when the fault ends, that the links' traffic was affected. They
//! are lifted with every other link when the step ends.

use quorumlock_testkit::{Mode, Modes};

use super::{Fault, Nemesis, Path, Pending, Targets};

impl Fault {
    /// The proxy links (client, node) this fault sets, and the modes it sets them to, on a
    /// run of `masters` masters; `None` for a fault that is not the proxy's.
    pub fn proxy_links(&self, masters: usize) -> Option<(Vec<(usize, usize)>, Modes)> {
        let requests = |to_node| Modes {
            to_node,
            to_client: Mode::Pass,
        };
        let replies = |to_client| Modes {
            to_node: Mode::Pass,
            to_client,
        };
        Some(match self {
            Self::Partition {
                clients,
                nodes,
                mode,
            } => (links(clients, nodes), Modes::both(*mode)),
            Self::Ring {
                clients,
                nodes,
                mode,
            } => {
                let quorum = nodes / 2 + 1;
                let cut = (0..*clients)
                    .flat_map(|c| (quorum..*nodes).map(move |k| (c, (c + k) % nodes)))
                    .collect();
                (cut, Modes::both(*mode))
            }
            Self::OneWay {
                clients,
                nodes,
                path,
            } => {
                let modes = match path {
                    Path::Requests => requests(Mode::Blackhole),
                    Path::Replies => replies(Mode::Blackhole),
                };
                (links(clients, nodes), modes)
            }
            Self::HoldReplies { clients, nodes } => (links(clients, nodes), replies(Mode::Hold)),
            Self::Delay { clients, node, by } => {
                (links(clients, &[*node]), requests(Mode::Delay(*by)))
            }
            Self::SlowClients { clients, by } => {
                let all: Vec<usize> = (0..masters).collect();
                (links(clients, &all), requests(Mode::Delay(*by)))
            }
            _ => return None,
        })
    }
}

impl Nemesis {
    /// Sets `links` to `modes`, to be proven by the traffic they affect from now on.
    pub(super) fn set_links(
        &mut self,
        t: &Targets<'_>,
        label: String,
        links: &[(usize, usize)],
        modes: Modes,
    ) {
        let links = links.to_vec();
        let baselines = links.iter().map(|&(c, n)| t.proxy.affected(c, n)).collect();
        for &(c, n) in &links {
            t.proxy.set(c, n, modes);
        }
        self.pending.push(Pending::Links {
            label,
            links,
            baselines,
        });
    }

    /// Lifts every link fault: every link passes again (the proxy's links are only ever set
    /// by these faults, so all of them pass).
    pub(super) fn pass_links(t: &Targets<'_>) {
        t.proxy.heal_all();
    }
}

/// The proof of a proxy fault on `links` since each link's `baselines` entry.
pub(super) fn prove(
    t: &Targets<'_>,
    links: &[(usize, usize)],
    baselines: &[u64],
) -> Result<String, String> {
    let each: Vec<u64> = links
        .iter()
        .zip(baselines)
        .map(|(&(c, n), &base)| t.proxy.affected(c, n).saturating_sub(base))
        .collect();
    links_reading(links, &each)
}

/// Every link from `clients` to `nodes`.
pub(super) fn links(clients: &[usize], nodes: &[usize]) -> Vec<(usize, usize)> {
    clients
        .iter()
        .flat_map(|&c| nodes.iter().map(move |&n| (c, n)))
        .collect()
}

/// The took-effect reading of a proxy fault on `links`, which were `affected` each: proven
/// when any traffic was affected, naming the links that saw none.
fn links_reading(links: &[(usize, usize)], affected: &[u64]) -> Result<String, String> {
    let total: u64 = affected.iter().sum();
    if total == 0 {
        return Err("no traffic crossed the faulty links".to_string());
    }
    let idle: Vec<String> = links
        .iter()
        .zip(affected)
        .filter(|(_, &a)| a == 0)
        .map(|(&(c, n), _)| format!("client {c} to node {n}"))
        .collect();
    Ok(if idle.is_empty() {
        format!("{total} bytes and connections affected")
    } else {
        format!(
            "{total} bytes and connections affected; none on {}",
            idle.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::links_reading;

    /// A proxy fault is proven by any traffic it affected; the links it left untouched are
    /// named (a cut that missed one of its links shows there), and none at all is no proof.
    #[test]
    fn links_reading_names_the_untouched_links() {
        let links = [(0, 2), (0, 3), (0, 4)];
        assert_eq!(
            links_reading(&links, &[40, 45, 40]),
            Ok("125 bytes and connections affected".to_string())
        );
        assert_eq!(
            links_reading(&links, &[40, 0, 85]),
            Ok("125 bytes and connections affected; none on client 0 to node 3".to_string())
        );
        assert!(links_reading(&links, &[0, 0, 0]).is_err());
    }
}
