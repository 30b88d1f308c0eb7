//! What happened in one simulated run: every hold a client believed it had (from its grant to
//! the end of its validity or its release, in simulated real time), and the event trace, whose
//! hash proves that a seed replays byte for byte.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

/// What a hold is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lock of one resource.
    Lock,
    /// One resource of a set locked at once.
    Set,
    /// One of a semaphore's permits.
    Permit,
    /// A reader of a read-write lock.
    Read,
    /// The writer of a read-write lock.
    Write,
}

/// One hold as its client believed it: from `granted` to `until`, both in simulated time.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The client host.
    pub client: usize,
    /// What it holds.
    pub kind: Kind,
    /// The resource, semaphore or read-write lock: holds of one group exclude each other.
    pub group: String,
    /// When the acquisition (or extension) was called.
    pub asked: Duration,
    /// When it returned the grant.
    pub granted: Duration,
    /// When the client stopped counting on it: its validity ran out, or it started releasing.
    pub until: Duration,
    /// Its fencing token, for a first grant (not an extension) of a fenced claim.
    pub token: Option<u64>,
}

/// One run of a slot, as its runner had it: from the claim's grant until it stopped (its time
/// was up, or its lease was lost), before it completed or abandoned the slot.
#[derive(Debug, Clone)]
pub struct SlotRun {
    /// The client host.
    pub client: usize,
    /// The slot.
    pub slot: String,
    /// When the claim returned.
    pub granted: Duration,
    /// When the run stopped.
    pub ended: Duration,
}

/// How many violations seen as they happened a failing seed prints.
const FIRST_VIOLATIONS: usize = 10;

/// How many trace lines a failing seed prints.
const TAIL: usize = 40;

/// The run's holds and trace.
#[derive(Default)]
pub struct History {
    /// Every hold, in the order granted.
    pub holds: Vec<Hold>,
    /// Grants: acquisitions and slot claims that succeeded (a set's counts once, extensions do
    /// not).
    pub grants: u64,
    /// Clients that could not get a lock within the liveness bound after the heal.
    pub dead: Vec<usize>,
    /// Every slot run, in the order they ended.
    pub slot_runs: Vec<SlotRun>,
    /// The runner names of slot claims dropped before they returned.
    pub dropped_claims: std::collections::BTreeSet<String>,
    /// The first violations seen as they happened, as trace lines.
    pub first_violations: Vec<String>,
    /// Violations seen at the moment they happened (a grant's validity, an extension), by
    /// checker; the interval checkers run over `holds` at the end.
    pub seen: super::checker::Violations,
    trace: sha1_smol::Sha1,
    tail: VecDeque<String>,
    lines: u64,
    /// Where every trace line goes too, if anywhere (see [`TRACE_FILE`]).
    copy: Option<std::io::BufWriter<std::fs::File>>,
}

/// The environment variable naming a file to which every trace line is appended: diffing two
/// runs' files shows where they part.
pub const TRACE_FILE: &str = "QUORUMLOCK_SIM_TRACE";

impl History {
    /// An empty history; its trace lines go to the file [`TRACE_FILE`] names too, if set.
    ///
    /// # Errors
    ///
    /// The file cannot be opened for appending.
    pub fn new() -> std::io::Result<Self> {
        let copy = match std::env::var_os(TRACE_FILE) {
            Some(path) => Some(std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            )),
            None => None,
        };
        Ok(Self {
            copy,
            ..Self::default()
        })
    }

    /// Records a hold (a set's grant is one hold per resource, an extension a new hold); its
    /// index, to end it early with [`Self::release`].
    pub fn hold(&mut self, hold: Hold) -> usize {
        self.event(
            hold.granted,
            format_args!(
                "c{} {:?} {} asked={} until={} token={:?}",
                hold.client,
                hold.kind,
                hold.group,
                hold.asked.as_micros(),
                hold.until.as_micros(),
                hold.token
            ),
        );
        self.holds.push(hold);
        self.holds.len() - 1
    }

    /// The client of hold `index` stops counting on it at `at` (it starts releasing).
    pub fn release(&mut self, index: usize, at: Duration) {
        if let Some(hold) = self.holds.get_mut(index) {
            hold.until = hold.until.min(at);
            let line = format!("c{} release {} {}", hold.client, hold.group, index);
            self.event(at, format_args!("{line}"));
        }
    }

    /// Records a slot run (a grant: its claim).
    pub fn slot_run(&mut self, run: SlotRun) {
        self.grants += 1;
        self.event(
            run.ended,
            format_args!(
                "c{} ran slot {} from {}",
                run.client,
                run.slot,
                run.granted.as_micros()
            ),
        );
        self.slot_runs.push(run);
    }

    /// A violation of `checker` seen at `at`, with what it was.
    pub fn violation(
        &mut self,
        at: Duration,
        checker: &'static str,
        what: std::fmt::Arguments<'_>,
    ) {
        *self.seen.entry(checker).or_default() += 1;
        self.event(at, format_args!("VIOLATION {checker}: {what}"));
        if self.first_violations.len() < FIRST_VIOLATIONS {
            self.first_violations.extend(self.tail.back().cloned());
        }
    }

    /// Appends one line to the trace.
    pub fn event(&mut self, at: Duration, what: std::fmt::Arguments<'_>) {
        let mut line = String::new();
        let _ = write!(line, "{:>12} {what}", at.as_micros());
        self.trace.update(line.as_bytes());
        self.trace.update(b"\n");
        if let Some(copy) = &mut self.copy {
            use std::io::Write as _;
            // A copy for reading only: the hash above is what replays are checked by.
            let _ = writeln!(copy, "{line}");
        }
        self.lines += 1;
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// The hash of the whole trace (SHA-1, first 16 hex digits).
    pub fn trace_hash(&self) -> String {
        self.trace.digest().to_string()[..16].to_owned()
    }

    /// The last lines of the trace.
    pub fn tail(&self) -> impl Iterator<Item = &str> {
        self.tail.iter().map(String::as_str)
    }

    /// How many lines the trace has.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}
