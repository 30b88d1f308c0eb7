//! `quorumlock provision`: vouch for brand-new masters under restart protection, refusing any
//! whose process started less than one quarantine (max TTL plus drift) ago unless forced.

use quorumlock::Redlock;

use crate::args::ProvisionArgs;
use crate::exit;

/// Runs `quorumlock provision`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, args: ProvisionArgs) -> u8 {
    let Some(quarantine) = locks.restart_quarantine() else {
        eprintln!(
            "quorumlock: provision needs --restart-protection MAX_TTL (the maximum TTL of the \
             deployment): masters that started less than that ago are refused"
        );
        return exit::USAGE;
    };
    if !args.force {
        let mut unreachable = false;
        let mut recent = Vec::new();
        for (node, uptime) in locks.master_uptimes().await {
            match uptime {
                Ok(uptime) if uptime < quarantine => recent.push((node, uptime)),
                Ok(_) => {}
                Err(error) => {
                    eprintln!("quorumlock: cannot read the uptime of {error}");
                    unreachable = true;
                }
            }
        }
        if unreachable {
            eprintln!("quorumlock: provision not started: every node must answer");
            return exit::UNAVAILABLE;
        }
        if !recent.is_empty() {
            for (node, uptime) in &recent {
                eprintln!(
                    "quorumlock: {node} started {}s ago, less than the max TTL plus drift \
                     ({quarantine:?}): it may have restarted and forgotten locks that are \
                     still valid",
                    uptime.as_secs()
                );
            }
            eprintln!(
                "quorumlock: provision refused, nothing written; wait {quarantine:?} after the \
                 last restart, or pass --force if these nodes are brand new"
            );
            return exit::REFUSED;
        }
    }
    match locks.provision().await {
        Ok(()) => {
            println!("provisioned {} node(s)", locks.node_count());
            0
        }
        Err(error) => {
            eprintln!("quorumlock: provision incomplete: {error}");
            exit::UNAVAILABLE
        }
    }
}
