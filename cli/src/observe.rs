//! `quorumlock observe`: follow who leads an election, one line on stdout per change.

use futures::StreamExt;
use quorumlock::Redlock;

use crate::args::ObserveArgs;
use crate::exit;
use crate::failure;
use crate::signals::{self, Forwarded};

/// Runs `quorumlock observe`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, args: ObserveArgs) -> u8 {
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("quorumlock: cannot install signal handlers: {error}");
            return exit::USAGE;
        }
    };
    let mut changes = match locks.election(&args.name).observe() {
        Ok(changes) => changes,
        Err(error) => {
            eprintln!("quorumlock: cannot observe {:?}: {error}", args.name);
            return failure::code(&error);
        }
    };
    let mut seen = 0;
    while args.changes.is_none_or(|wanted| seen < wanted) {
        tokio::select! {
            change = changes.next() => {
                // The stream never ends; `None` would only mean it did after all.
                let Some(leader) = change else { return exit::UNAVAILABLE };
                match leader {
                    Some(leader) => println!(
                        "leader {:?} (fencing token {})",
                        leader.identity(),
                        leader.fence()
                    ),
                    None => println!("no leader"),
                }
                seen += 1;
            }
            signal = signals.next() => return signals::exit_code(signal),
        }
    }
    0
}
