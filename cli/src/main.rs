//! `quorumlock`: a cluster-wide `flock` on Redlock. Run `quorumlock --help`.
//!
//! * `exec` holds a lock while a command runs, renewing it, and terminates the command if the
//!   lock is lost; with `--once SLOT` it runs each slot of a job once across hosts (`once`);
//! * `elect` runs a command while this process is the leader of an election;
//! * `status` shows what each node holds for a resource (and an election's leader);
//! * `provision` marks fresh nodes as usable under restart protection.
//!
//! Exit codes are in the `exit` module, in `--help` and in the README.

mod args;
mod duration;
mod elect;
mod exec;
mod exit;
mod once;
mod provision;
mod signals;
mod status;
mod supervise;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;
use quorumlock::Redlock;

use args::{Cli, Command, Connection};

/// The longest the process waits on its way out for deletes still travelling to slow nodes.
const MAX_STRAGGLER_TIME: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return match error.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => ExitCode::SUCCESS,
                _ => exit::code(exit::USAGE),
            };
        }
    };
    let locks = match manager(&cli.conn) {
        Ok(locks) => locks,
        Err(message) => {
            eprintln!("quorumlock: {message}");
            return exit::code(exit::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("quorumlock: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // At most a few seconds, whatever the node timeout (`--node-timeout 100y` means none): a
    // delete that has not arrived by then leaves the lock to expire after its TTL.
    let straggler_time = cli.conn.node_timeout.min(MAX_STRAGGLER_TIME);
    let code = runtime.block_on(async move {
        let code = match cli.command {
            Command::Exec(args) => exec::run(&locks, args).await,
            Command::Elect(args) => elect::run(&locks, args).await,
            Command::Status(args) => status::run(&locks, &cli.conn, args).await,
            Command::Provision(args) => provision::run(&locks, args).await,
        };
        // A release returns once a quorum confirmed it; the deletes still on their way to
        // slower nodes run as background tasks, which die with the runtime. They take at most
        // one node timeout.
        tokio::time::sleep(straggler_time).await;
        code
    });
    runtime.shutdown_background();
    exit::code(code)
}

/// The lock manager the global options describe; fencing is always on, so that `exec` can hand
/// the command a token.
fn manager(conn: &Connection) -> Result<Redlock, String> {
    if conn.nodes.iter().all(|n| n.trim().is_empty()) {
        return Err(
            "no nodes given: expected --nodes or QUORUMLOCK_NODES with comma-separated redis:// URLs"
                .into(),
        );
    }
    let mut builder = Redlock::builder()
        .nodes(conn.nodes.iter().map(|n| n.trim().to_string()))
        .key_prefix(&conn.key_prefix)
        .node_timeout(conn.node_timeout);
    if let Some(max_ttl) = conn.restart_protection {
        builder = builder.max_ttl(max_ttl).restart_protection(true);
    }
    builder
        .build()
        .map(|locks| locks.fenced())
        .map_err(|e| e.to_string())
}
