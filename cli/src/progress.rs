//! While `exec` or `elect` waits: a line on stderr now and then saying who holds what it waits
//! for, on how many masters, and for how long it has waited; and an end to the wait when no
//! quorum of masters answered for `--max-unavailable` (instead of waiting silently forever).

use std::future::Future;
use std::time::Duration;

use quorumlock::Redlock;
use tokio::time::Instant;

use crate::args::Connection;
use crate::duration::show;
use crate::survey::{survey, Survey};

/// The first line comes this long after the wait began; the gap then doubles up to
/// [`LONGEST_GAP`], so that a long wait does not flood a log.
const FIRST_LINE: Duration = Duration::from_secs(1);
/// The longest gap between two lines.
const LONGEST_GAP: Duration = Duration::from_secs(60);
/// How often the masters are read while too few answer, to end the wait on time.
const UNAVAILABLE_POLL: Duration = Duration::from_secs(1);

/// What a wait watches.
pub(crate) struct Watch<'a> {
    pub(crate) locks: &'a Redlock,
    pub(crate) conn: &'a Connection,
    /// The lock it waits for.
    pub(crate) resource: &'a str,
    /// For the lines: `the lock on "x"`, `leadership of "e"`.
    pub(crate) what: String,
    pub(crate) max_unavailable: Duration,
    /// Whether `resource` names the lock waited for, so that its holder is worth a line (not
    /// for a semaphore's or a read-write lock's permits, kept under other keys).
    pub(crate) holder_known: bool,
}

/// How a watched wait ended.
pub(crate) enum Waited<T> {
    /// The wait itself ended.
    Done(T),
    /// No quorum answered for `max_unavailable`: the last survey, and how long.
    Unavailable(Survey, Duration),
}

/// Runs `wait` to its end, printing progress lines, unless no quorum answers for
/// `max_unavailable` first (then `wait` is dropped: the library's waits are cancel safe).
pub(crate) async fn watched<T>(wait: impl Future<Output = T>, watch: &Watch<'_>) -> Waited<T> {
    tokio::select! {
        done = wait => Waited::Done(done),
        (survey, down_for) = monitor(watch) => Waited::Unavailable(survey, down_for),
    }
}

/// Reads the masters now and then, printing a line each time; returns only when no quorum
/// answered for `max_unavailable`, or at once when too many refuse the configuration.
async fn monitor(watch: &Watch<'_>) -> (Survey, Duration) {
    let started = Instant::now();
    let mut gap = FIRST_LINE;
    let mut next_line = started + gap;
    let mut down_since: Option<Instant> = None;
    loop {
        let next_read = match down_since {
            Some(_) => next_line.min(Instant::now() + UNAVAILABLE_POLL),
            None => next_line,
        };
        tokio::time::sleep_until(next_read).await;
        let survey = survey(watch.locks, watch.conn, watch.resource).await;
        let now = Instant::now();
        if survey.is_misconfigured() {
            // Refused credentials or a key of another type: no wait ends that.
            return (survey, now.duration_since(started));
        }
        if survey.has_quorum() {
            down_since = None;
        } else {
            let since = *down_since.get_or_insert(now);
            if now.duration_since(since) >= watch.max_unavailable {
                return (survey, now.duration_since(started));
            }
        }
        if now >= next_line {
            eprintln!(
                "quorumlock: {}",
                line(watch, &survey, now.duration_since(started))
            );
            gap = (gap * 2).min(LONGEST_GAP);
            next_line = now + gap;
        }
    }
}

/// One progress line.
fn line(watch: &Watch<'_>, survey: &Survey, waited: Duration) -> String {
    let head = format!("waiting {} for {}", show(round(waited)), watch.what);
    let n = survey.nodes.len();
    if !survey.has_quorum() {
        return format!(
            "{head}: only {} of {n} masters answer, a quorum needs {} (giving up after {} of that): {}",
            survey.answered(),
            survey.quorum,
            show(watch.max_unavailable),
            survey.unreachable()
        );
    }
    if !watch.holder_known {
        return format!(
            "{head}: {} of {n} masters answer; the holders hold it",
            survey.answered()
        );
    }
    let held_on = survey.held_on();
    if held_on == 0 {
        return format!(
            "{head}: free on {} of {n} masters, taking it",
            survey.answered()
        );
    }
    let expires = match survey.expires_in() {
        Some(ttl) => format!(", expires in {} unless renewed", show(round(ttl))),
        None => String::new(),
    };
    format!(
        "{head}: held on {held_on} of {n} masters by {}{expires}",
        survey.holder()
    )
}

/// Whole seconds, for lines a person reads.
fn round(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs())
}
