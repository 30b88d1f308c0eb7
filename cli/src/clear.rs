//! `quorumlock clear`: an operator removes a lock, or a `--once` slot's claim and record, left
//! behind by a holder known to be gone. Without `--force` it only says what it would remove.

use quorumlock::{Cleared, LockError, Redlock, SlotStatus};

use crate::args::{ClearArgs, Connection};
use crate::exit;
use crate::failure;
use crate::survey::survey;

/// Runs `quorumlock clear`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, conn: &Connection, args: ClearArgs) -> u8 {
    let name = &args.resource;
    let (what, found) = match &args.slot {
        Some(slot) => (
            format!("slot {slot:?} of {name:?}"),
            match locks.slots().status(name, slot).await {
                Ok(status) => slot_state(&status),
                Err(error @ LockError::InvalidArgument(_)) => {
                    eprintln!("quorumlock: {error}");
                    return exit::USAGE;
                }
                Err(error) => format!("unreadable ({error})"),
            },
        ),
        None => {
            let survey = survey(locks, conn, name).await;
            let found = format!(
                "{} on {} of {} masters, by {}",
                survey.state(),
                survey.held_on(),
                survey.nodes.len(),
                survey.holder()
            );
            (format!("the lock on {name:?}"), found)
        }
    };
    if !args.force {
        eprintln!(
            "quorumlock: {what} is {found}; clear removes it whoever holds it (a holder still \
             running would then run beside the next one): pass --force to remove it; nothing \
             was removed"
        );
        return exit::REFUSED;
    }
    let cleared = match &args.slot {
        Some(slot) => locks.clear_slot(name, slot).await,
        None => locks.clear_lock(name).await,
    };
    let cleared = match cleared {
        Ok(cleared) => cleared,
        Err(error) => {
            eprintln!("quorumlock: {error}");
            return failure::code(&error);
        }
    };
    eprintln!("quorumlock: {what} was {found}");
    print(&cleared)
}

/// A slot's state in words.
fn slot_state(status: &SlotStatus) -> String {
    let (state, record) = match status {
        SlotStatus::Free => return "free".into(),
        SlotStatus::Running(record) => ("running", record),
        SlotStatus::Completed(record) => ("completed", record),
        SlotStatus::Abandoned(record) => ("abandoned", record),
        _ => return "in an unknown state".into(),
    };
    let runner = record.runner.as_deref().unwrap_or("an unknown runner");
    format!("{state} (by {runner:?}, attempt {})", record.attempts)
}

/// Prints what each master removed; the exit code: 0, 78 if a master refused the configuration,
/// or 69 if a master could not be cleared.
fn print(cleared: &[Cleared]) -> u8 {
    let mut code = 0;
    for node in cleared {
        match node.removed() {
            Ok([]) => println!("{}: nothing to remove", node.node()),
            Ok(keys) => {
                for key in keys {
                    println!(
                        "{}: removed {}",
                        node.node(),
                        key.replace('\u{1f}', "\\x1f")
                    );
                }
            }
            Err(error) if crate::survey::is_refusal(error) => {
                eprintln!("quorumlock: {error}; fix the configuration and clear again");
                code = exit::MISCONFIGURED;
            }
            Err(error) => {
                eprintln!("quorumlock: {error}; clear again once it answers");
                if code == 0 {
                    code = exit::UNAVAILABLE;
                }
            }
        }
    }
    code
}
