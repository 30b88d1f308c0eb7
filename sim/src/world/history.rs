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
    /// A lock kept by a lease, until its holder learns that the lease ended.
    Lease,
    /// An election's leadership, until its leader learns that it ended.
    Leader,
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
    /// For a hold kept by a lease (a lease's, a leader's): the end of the lock's validity as
    /// the library had it when the hold ended. A holder whose process was paused counts on no
    /// more than that within the lock's model (see [`History::pauses`]).
    pub valid_until: Option<Duration>,
    /// The reentrant owner whose guard this is (its session's operation number), if any: the
    /// guards of one owner may overlap and share a token; they exclude every other holder.
    pub owner: Option<u32>,
}

/// One run of a slot, as its runner had it: from the claim's grant until it stopped (its time
/// was up, or its lease was lost), before it completed or abandoned the slot.
#[derive(Debug, Clone)]
pub struct SlotRun {
    /// The client host.
    pub client: usize,
    /// The slot.
    pub slot: String,
    /// The checker that judges it: how it was claimed (`slot-at-most-once` for a single claim,
    /// `batch-at-most-once` in a batch, `scheduler-at-most-once` by the scheduler's runner).
    pub checker: &'static str,
    /// When the claim returned.
    pub granted: Duration,
    /// When the run stopped.
    pub ended: Duration,
    /// The end of its lease's validity as the library had it when the run stopped (see
    /// [`Hold::valid_until`]), if known.
    pub valid_until: Option<Duration>,
    /// Its claim's fencing token, where the checker needs it (a retried slot's attempts).
    pub token: Option<u64>,
}

/// A client process paused (frozen) by the nemesis, from `from` to `to`.
#[derive(Debug, Clone, Copy)]
pub struct PauseWindow {
    /// The client host.
    pub client: usize,
    /// When it froze.
    pub from: Duration,
    /// When it resumed (the end of the run for one still paused).
    pub to: Duration,
}

/// How soon after its resume a holder whose validity ran out while it was frozen stops
/// counting on it: its timers that fell due meanwhile fire at the resume (seen: in the same
/// step, every time), so a belief that lasts longer is its library's, not the pause's.
pub const HEARD_AFTER_RESUME: Duration = Duration::from_millis(10);

impl PauseWindow {
    /// The end of a belief ending at `end` that the model grants a holder paused in this
    /// window, given the validity `valid_until` its library had: if the holder was frozen when
    /// its validity ran out (or froze after that, before the belief ended), and let go of it
    /// on resuming (within [`HEARD_AFTER_RESUME`]), the belief past both the validity and the
    /// pause's start is the pause's (a frozen holder cannot learn that it lost; a call frozen
    /// across it returns a claim already lost); `None` if the pause had no part in it (it
    /// ended before the validity did, or began after the belief), or if the holder went on
    /// believing once it ran again (then the whole belief is judged).
    pub fn caps(&self, end: Duration, valid_until: Duration) -> Option<Duration> {
        (self.from < end && self.to > valid_until && end <= self.to + HEARD_AFTER_RESUME)
            .then(|| end.min(valid_until.max(self.from)))
    }

    /// `pauses` with each client's pauses that follow one another without the client running
    /// in between (resumed and paused again at one instant) joined into one window.
    pub fn joined(pauses: &[Self]) -> Vec<Self> {
        let mut sorted = pauses.to_vec();
        sorted.sort_by_key(|p| (p.client, p.from));
        let mut joined: Vec<Self> = Vec::with_capacity(sorted.len());
        for pause in sorted {
            match joined.last_mut() {
                Some(last) if last.client == pause.client && pause.from <= last.to => {
                    last.to = last.to.max(pause.to);
                }
                _ => joined.push(pause),
            }
        }
        joined
    }
}

/// One operation of a workload on the masters: from its call until it and whatever it held
/// were released (or it failed, or was dropped). The lock values it drew name it (see
/// `seams`), so that a key it left on a master is found to be its.
#[derive(Debug, Clone)]
pub struct Op {
    /// The client host.
    pub client: usize,
    /// When it was called.
    pub start: Duration,
    /// When it ended, once it did.
    pub end: Option<Duration>,
}

/// A fault that may leave a key on a master beyond its operation (a request held or delayed
/// and landing late, a cleanup that could not reach the master, data restored from before a
/// release): on one master from every client, or on one client's link to it.
#[derive(Debug, Clone)]
pub struct FaultWindow {
    /// The master.
    pub master: usize,
    /// The client whose link it was, or `None` for the whole master.
    pub client: Option<usize>,
    /// When it began.
    pub from: Duration,
    /// When it was lifted (the end of the run for one still in force).
    pub to: Duration,
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
    /// The runner names of slot claims dropped before they returned: by which client, when.
    pub dropped_claims: std::collections::BTreeMap<String, (usize, Duration)>,
    /// The first violations seen as they happened, as trace lines.
    pub first_violations: Vec<String>,
    /// Violations seen at the moment they happened (a grant's validity, an extension), by
    /// checker; the interval checkers run over `holds` at the end.
    pub seen: super::checker::Violations,
    /// Every operation whose lock values are attributed, by number.
    pub ops: Vec<Op>,
    /// The faults on masters and links, as the nemesis started and lifted them.
    pub faults: Vec<FaultWindow>,
    /// When the nemesis healed everything, once it did.
    pub healed: Option<Duration>,
    /// Client processes the nemesis paused.
    pub pauses: Vec<PauseWindow>,
    /// What the faults did, by kind (segments a one-way or ring cut held, pauses, beliefs a
    /// pause outlived): the proof that each took effect.
    pub effects: std::collections::BTreeMap<&'static str, u64>,
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
                "c{} {:?} {} asked={} until={} token={:?}{}",
                hold.client,
                hold.kind,
                hold.group,
                hold.asked.as_micros(),
                hold.until.as_micros(),
                hold.token,
                hold.owner
                    .map(|o| format!(" owner={o}"))
                    .unwrap_or_default()
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

    /// A new operation of `client`, called at `at`: its number.
    pub fn begin_op(&mut self, client: usize, at: Duration) -> u32 {
        self.ops.push(Op {
            client,
            start: at,
            end: None,
        });
        u32::try_from(self.ops.len() - 1).unwrap_or(u32::MAX)
    }

    /// Operation `op` ended at `at`.
    pub fn end_op(&mut self, op: u32, at: Duration) {
        if let Some(op) = self.ops.get_mut(op as usize) {
            op.end = Some(at);
        }
    }

    /// A fault on `master` (from every client, or on `client`'s link) began at `at`: its index,
    /// to [`Self::lift`] it.
    pub fn fault(&mut self, master: usize, client: Option<usize>, at: Duration) -> usize {
        self.faults.push(FaultWindow {
            master,
            client,
            from: at,
            to: Duration::MAX,
        });
        self.faults.len() - 1
    }

    /// Fault `index` was lifted at `at`.
    pub fn lift(&mut self, index: usize, at: Duration) {
        if let Some(fault) = self.faults.get_mut(index) {
            fault.to = fault.to.min(at);
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
