//! Why a lock, a leadership or a slot was not taken, as an exit code and a message that names
//! every node: held elsewhere (75), unavailable (69) or misconfigured (78), told apart so that
//! a cron wrapper knows whether the job ran elsewhere or nothing can run at all.

use quorumlock::{InvalidArgument, LockError, NodeErrorKind, Redlock};

use crate::args::Connection;
use crate::duration::show;
use crate::exit;
use crate::survey::{survey, Survey};

/// The exit code for `error`.
pub(crate) fn code(error: &LockError) -> u8 {
    if matches!(error, LockError::InvalidArgument(_)) {
        return exit::USAGE;
    }
    if error.is_contended() {
        return exit::NOT_ACQUIRED;
    }
    // Refused credentials never heal by themselves; a server error only when the library
    // says retrying cannot help (a key of another type, an ACL), not a passing OOM.
    let errors = error.node_errors();
    let auth = errors
        .iter()
        .any(|e| matches!(e.kind(), NodeErrorKind::Auth(_)));
    let server = errors
        .iter()
        .any(|e| matches!(e.kind(), NodeErrorKind::Server(_)));
    if auth || (server && !error.is_retryable()) {
        return exit::MISCONFIGURED;
    }
    match error {
        // A wait that ran out before any round was decided: nobody was seen to hold it.
        LockError::DeadlinePassed { last: None, .. } => exit::NOT_ACQUIRED,
        _ => exit::UNAVAILABLE,
    }
}

/// Prints why `what` failed (the library's error, then every node as a survey of `resource`
/// sees it) and returns the exit code.
pub(crate) async fn report(
    locks: &Redlock,
    conn: &Connection,
    resource: &str,
    what: &str,
    error: &LockError,
) -> u8 {
    let mut code = code(error);
    if let LockError::InvalidArgument(invalid) = error {
        eprintln!("quorumlock: {}", invalid_argument(invalid));
        return code;
    }
    let survey = survey(locks, conn, resource).await;
    // A key of another type makes `SET NX` fail as if the lock were held: the survey's reads
    // tell the refusal apart.
    if survey.is_misconfigured() {
        code = exit::MISCONFIGURED;
    } else if code == exit::UNAVAILABLE
        && matches!(error, LockError::DeadlinePassed { .. })
        && survey.held_by_a_quorum()
    {
        // The wait ran out while a quorum answered that the lock is held: held elsewhere,
        // though the last round itself timed out (a loaded machine, writes paused).
        code = exit::NOT_ACQUIRED;
    }
    let why = match code {
        exit::NOT_ACQUIRED => format!(
            "held on {} of {} masters by {}",
            survey.held_on(),
            survey.nodes.len(),
            survey.holder()
        ),
        exit::MISCONFIGURED => {
            "the masters refused the configuration (retrying cannot help)".into()
        }
        _ => format!(
            "unavailable: {} of {} masters answer, a quorum needs {}",
            survey.answered(),
            survey.nodes.len(),
            survey.quorum
        ),
    };
    eprintln!("quorumlock: {what}: {why}: {error}");
    print_nodes(&survey);
    code
}

/// Reports `error` without reading the masters (a semaphore's or a read-write lock's keys are
/// not the resource's): `what`, why, every master's error; returns the exit code.
pub(crate) fn plain(what: &str, error: &LockError) -> u8 {
    let code = code(error);
    match error {
        LockError::InvalidArgument(invalid) => {
            eprintln!("quorumlock: {}", invalid_argument(invalid))
        }
        _ => eprintln!("quorumlock: {what}: {error}"),
    }
    code
}

/// Prints why waiting stopped: no quorum answered for `for_how_long`, or too many masters
/// refused the configuration. Returns the exit code.
pub(crate) fn unavailable(what: &str, survey: &Survey, for_how_long: std::time::Duration) -> u8 {
    if survey.is_misconfigured() {
        eprintln!(
            "quorumlock: {what}: the masters refused the configuration (retrying cannot help)"
        );
        print_nodes(survey);
        return exit::MISCONFIGURED;
    }
    eprintln!(
        "quorumlock: {what}: unavailable: only {} of {} masters answered for {}, a quorum needs {} (see --max-unavailable)",
        survey.answered(),
        survey.nodes.len(),
        show(for_how_long),
        survey.quorum
    );
    print_nodes(survey);
    exit::UNAVAILABLE
}

/// Every node, one line each.
fn print_nodes(survey: &Survey) {
    for line in survey.node_lines() {
        eprintln!("quorumlock:   {line}");
    }
}

/// A rejected argument, its bounds in words a person reads.
pub(crate) fn invalid_argument(invalid: &InvalidArgument) -> String {
    match invalid {
        InvalidArgument::TtlTooLong { ttl, max } => format!(
            "ttl {} is too long: expected at most {}",
            show(*ttl),
            crate::duration::coarse(*max)
        ),
        other => other.to_string(),
    }
}
