//! `quorumlock`: a cluster-wide `flock` on Redlock. Run `quorumlock --help`.
//!
//! * `exec` holds a lock while a command runs, renewing it, and terminates the command if the
//!   lock is lost; with `--once SLOT` it runs each slot of a job once across hosts (`once`);
//! * `elect` runs a command while this process is the leader of an election;
//! * `observe` follows who leads an election;
//! * `status` shows what each node holds for a resource (and an election's leader), or the
//!   state of a `--once` slot;
//! * `clear` removes a lock or a slot left behind (only with `--force`);
//! * `provision` marks fresh nodes as usable under restart protection.
//!
//! Exit codes are in the `exit` module, in `--help` and in docs/cli.md.

mod aliases;
mod args;
mod clear;
mod duration;
mod elect;
mod exec;
mod exit;
mod failure;
mod observe;
mod once;
mod progress;
mod provision;
mod signals;
mod status;
mod supervise;
mod survey;

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
    // Only a command that releases a lock leaves deletes travelling: the others answer and go.
    let straggler_time = match cli.command {
        Command::Exec(_) | Command::Elect(_) => straggler_time,
        _ => Duration::ZERO,
    };
    let code = runtime.block_on(async move {
        let code = match cli.command {
            Command::Exec(args) => exec::run(&locks, &cli.conn, args).await,
            Command::Elect(args) => elect::run(&locks, &cli.conn, args).await,
            Command::Observe(args) => observe::run(&locks, args).await,
            Command::Status(args) => status::run(&locks, &cli.conn, args).await,
            Command::Clear(args) => clear::run(&locks, &cli.conn, args).await,
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
    for url in conn.nodes.iter().map(|n| n.trim()) {
        check_scheme(url)?;
    }
    let mut builder = Redlock::builder()
        .nodes(conn.nodes.iter().map(|n| n.trim().to_string()))
        .key_prefix(&conn.key_prefix)
        .node_timeout(conn.node_timeout);
    if let Some(max_ttl) = conn.restart_protection {
        builder = builder.max_ttl(max_ttl).restart_protection(true);
    }
    let locks = builder.build().map_err(|e| e.to_string())?;
    // After the library's checks, so that a malformed URL gets its own message first.
    let urls: Vec<&str> = conn.nodes.iter().map(|n| n.trim()).collect();
    aliases::check(&urls, redact)?;
    if locks.node_count() == 2 {
        eprintln!(
            "quorumlock: warning: 2 masters give no fault tolerance (a quorum needs both, so \
             either one down stops every lock): use 3 or more independent masters"
        );
    }
    Ok(locks.fenced())
}

/// Refuses a URL that is not `redis://` or `rediss://` with what was expected, rather than the
/// client library's terse parse error.
fn check_scheme(url: &str) -> Result<(), String> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis" | "rediss") => Ok(()),
        // No scheme: the library explains what it expected, naming the node.
        None => Ok(()),
        Some(other) => Err(format!(
            "node URL {:?} has the scheme {other}://: expected redis://host:port (or rediss:// \
             for TLS), as in redis://10.0.0.1:6379",
            redact(url)
        )),
    }
}

/// `url` with any password replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}
