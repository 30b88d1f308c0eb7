//! The workers of a cell: each contends on one resource through its own lock client, and
//! while it holds, reads both registers of jepsen-lite's resource and writes them back
//! (counter + 1, set ∪ {op}), the fenced one with the subject's token. Everything is recorded
//! in jepsen-lite's history format, so that its checkers judge the run.
//!
//! In a clock bump's cell, the first grant after the nemesis arms its rendezvous is held for a
//! fixed time (read at once, write at the end), and the nemesis steps the clocks inside it.
//!
//! Worker 0 makes the holder's faults itself, once, at its first grant after a given time: a
//! pause (it reads, goes silent past its TTL or session, then writes) or a partition (it keeps
//! working while cut off). A stopped process's kernel keeps its TCP connections up and sends
//! nothing; blackholing the worker's links does the same, so its heartbeats (etcd keep-alives,
//! ZooKeeper pings) stop as they would.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jepsen_lite::clock::{instant_ns, now_ns};
use jepsen_lite::history::{Event, Kind, Process};
use jepsen_lite::resource::{self, Op, Register, Request};
use quorumlock_testkit::Mode;
use serde_json::{json, Value};

use super::cells::Fault;
use super::rendezvous::{Holding, Rendezvous};
use super::testbed::Links;
use crate::LockSubject;

/// The one resource the workers contend on.
pub(super) const RESOURCE: &str = "compare";
/// How long one blocking acquisition waits before it is retried.
const ACQUIRE_WAIT: Duration = Duration::from_secs(10);
/// How often a worker standing aside for a rendezvous's holder looks again.
const GIVE_WAY_POLL: Duration = Duration::from_millis(5);
/// How long a failed acquisition (servers unavailable) waits before the next.
const BACKOFF: Duration = Duration::from_millis(50);
/// How long a partitioned holder's probe of the servers waits for an answer it must not get.
const PROBE_WAIT: Duration = Duration::from_millis(1500);
/// The pace of a partitioned holder's work on the registers.
const WORK_STEP: Duration = Duration::from_millis(100);

/// The history of a cell, shared by its workers and its nemesis.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    /// Records one event now.
    pub(super) fn log(
        &self,
        process: Process,
        kind: Kind,
        f: &str,
        value: Value,
        error: Option<String>,
    ) {
        let mut event = Event::now(process, kind, f, value);
        event.error = error;
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Records a nemesis event now.
    pub(super) fn nemesis(&self, f: &str, value: Value) {
        self.log(Process::nemesis(), Kind::Info, f, value, None);
    }

    /// When the last heal was recorded, and whether a grant was recorded after it; `None`
    /// before any heal.
    pub(super) fn since_last_heal(&self) -> Option<(u64, bool)> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let heal = events
            .iter()
            .filter(|e| e.process == Process::nemesis() && e.f == "heal")
            .map(|e| e.time_ns)
            .max()?;
        let granted = events
            .iter()
            .any(|e| e.f == "acquire" && e.kind == Kind::Ok && e.time_ns >= heal);
        Some((heal, granted))
    }

    /// The history, in time order.
    pub(super) fn events(&self) -> Vec<Event> {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        events.sort_by_key(|e| e.time_ns);
        events
    }
}

/// The holder's fault worker 0 makes, and when.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stall {
    /// [`Fault::ClientPause`] or [`Fault::Partition`].
    pub(super) fault: Fault,
    /// At its first grant this long after the start.
    pub(super) after: Duration,
    /// For this long.
    pub(super) length: Duration,
}

/// What a worker needs.
pub(super) struct Worker {
    /// Its number (its client process in the history, its proxy row).
    pub(super) id: u32,
    /// Its lock client.
    pub(super) subject: Arc<dyn LockSubject>,
    /// The links, to cut itself off.
    pub(super) links: Links,
    /// The resource's fenced store.
    pub(super) store: std::net::SocketAddr,
    /// The history.
    pub(super) recorder: Arc<Recorder>,
    /// Set when the cell ends.
    pub(super) stop: Arc<AtomicBool>,
    /// The holder's fault to make, for worker 0.
    pub(super) stall: Option<Stall>,
    /// The TTL, written with grants whose validity the client bounds (the checkers bound the
    /// validity by it).
    pub(super) ttl_ms: Option<u64>,
    /// Set by worker 0 once its stall is over.
    pub(super) stalled: Arc<AtomicBool>,
    /// Whether its client sends heartbeats, which a pause must be seen to stop.
    pub(super) heartbeats: bool,
    /// The nemesis's meeting with a holder, in a cell whose fault falls inside a section.
    pub(super) rendezvous: Option<Arc<Rendezvous>>,
}

/// A fault worker 0 made, and the reading that shows it took effect (or why not).
pub(super) type Made = (String, Result<String, String>);

impl Worker {
    fn process(&self) -> Process {
        Process::Client(self.id)
    }

    fn log(&self, kind: Kind, f: &str, value: Value, error: Option<String>) {
        self.recorder.log(self.process(), kind, f, value, error);
    }

    /// Runs until the cell ends; returns the fault it made, if any.
    ///
    /// # Errors
    ///
    /// When the store cannot be reached.
    pub(super) async fn run(self) -> std::io::Result<Option<Made>> {
        let started = Instant::now();
        let mut store = resource::Client::connect(self.store).await?;
        let mut made = None;
        let mut op: u64 = 0;
        let mut n = 0u64;
        while !self.stop.load(Ordering::Acquire) {
            // A worker that may not be the holder stands aside until the one that may is
            // granted: worker 0, on a bare majority, loses nearly every race to a waiter that
            // reaches every master (a rendezvous waited 11 s for it in one run of 18).
            if let Some(meeting) = &self.rendezvous {
                while meeting.gives_way(self.id) && !self.stop.load(Ordering::Acquire) {
                    tokio::time::sleep(GIVE_WAY_POLL).await;
                }
            }
            let lease = format!("{}-{n}", self.id);
            n += 1;
            let invoked = Instant::now();
            self.log(
                Kind::Invoke,
                "acquire",
                json!({"lease": lease, "resource": RESOURCE}),
                None,
            );
            let held = match self
                .subject
                .acquire(RESOURCE, Instant::now() + ACQUIRE_WAIT)
                .await
            {
                Ok(held) => held,
                Err(e) => {
                    let kind = if e.is_contended() {
                        Kind::Fail
                    } else {
                        Kind::Info
                    };
                    self.log(
                        kind,
                        "acquire",
                        json!({"lease": lease}),
                        Some(e.to_string()),
                    );
                    if !e.is_contended() {
                        tokio::time::sleep(BACKOFF).await;
                    }
                    continue;
                }
            };
            // The winning round of a blocking acquisition started after the call, when it
            // retried: only the return bounds it from above (as jepsen-lite's clients log it).
            let t_start = now_ns();
            let mut granted = json!({"lease": lease, "resource": RESOURCE, "t_start_ns": t_start,
                                     "token": held.token()});
            match held.valid_until() {
                Some(until) => {
                    granted["valid_until_ns"] = json!(instant_ns(until));
                    if let Some(ttl_ms) = self.ttl_ms {
                        granted["ttl_ms"] = json!(ttl_ms);
                    }
                }
                // A grant that hangs on a session is the client's until it releases it: the
                // claims checker ends the window at the release.
                None => granted["valid_until_ns"] = json!(u64::MAX),
            }
            self.log(Kind::Ok, "acquire", granted, None);
            let claimed = self.rendezvous.as_ref().filter(|meeting| {
                let holding = Holding {
                    worker: self.id,
                    lease: lease.clone(),
                    token: held.token(),
                    valid_until: held.valid_until(),
                };
                meeting.claim(holding, invoked)
            });
            let stall = self
                .stall
                .filter(|s| made.is_none() && started.elapsed() >= s.after);
            let mut section = Section {
                worker: &self,
                store: &mut store,
                lease: &lease,
                token: held.token(),
                op: &mut op,
            };
            match stall {
                None if claimed.is_some() => {
                    let hold = claimed.map_or(Duration::ZERO, |m| m.hold());
                    section.read_hold_write(Instant::now() + hold).await?;
                }
                None => section.read_modify_write().await?,
                Some(stall) if stall.fault == Fault::Partition => {
                    made = Some(
                        self.partitioned(&mut section, held.valid_until(), stall)
                            .await?,
                    );
                }
                Some(stall) => {
                    made = Some(self.paused(&mut section, held.valid_until(), stall).await?);
                }
            }
            self.log(Kind::Invoke, "release", json!({"lease": lease}), None);
            match held.release().await {
                Ok(()) => self.log(Kind::Ok, "release", json!({"lease": lease}), None),
                Err(e) => self.log(
                    Kind::Fail,
                    "release",
                    json!({"lease": lease}),
                    Some(e.to_string()),
                ),
            }
        }
        Ok(made)
    }

    /// Kleppmann's pause: the holder reads, goes silent past its TTL or session, then writes
    /// what it read, plus one.
    async fn paused(
        &self,
        section: &mut Section<'_>,
        valid_until: Option<Instant>,
        stall: Stall,
    ) -> std::io::Result<Made> {
        let read = section.read_all().await?;
        let row = self.id as usize;
        let before = self.links.row_affected(row);
        self.recorder.nemesis(
            "pause-client",
            json!({"client": self.id, "lease": section.lease}),
        );
        self.links.set_row(row, Mode::Blackhole);
        let silent = Instant::now();
        tokio::time::sleep(stall.length).await;
        let slept = silent.elapsed();
        let discarded = self.links.row_affected(row) - before;
        self.links.set_row(row, Mode::Pass);
        self.recorder
            .nemesis("resume-client", json!({"client": self.id}));
        self.recorder.nemesis("heal", json!({}));
        self.stalled.store(true, Ordering::Release);
        section.write_all(read).await?;
        let fault = format!("pause client {} for {:?}", self.id, stall.length);
        let past_validity = valid_until.is_none_or(|u| Instant::now() > u);
        let silenced = !self.heartbeats || discarded > 0;
        let reading = format!(
            "holding lease {}, silent {} ms with its links blackholed ({discarded} bytes of \
             its heartbeats discarded){}",
            section.lease,
            slept.as_millis(),
            if valid_until.is_some() {
                ", woke past its validity"
            } else {
                ""
            }
        );
        Ok((
            fault,
            if slept >= stall.length && past_validity && silenced {
                Ok(reading)
            } else {
                Err(reading)
            },
        ))
    }

    /// The holder is cut off from every server and keeps working on the registers; a probe
    /// of the servers during the cut shows that no request gets through.
    async fn partitioned(
        &self,
        section: &mut Section<'_>,
        valid_until: Option<Instant>,
        stall: Stall,
    ) -> std::io::Result<Made> {
        let row = self.id as usize;
        let before = self.links.row_affected(row);
        self.recorder.nemesis(
            "partition",
            json!({"client": self.id, "lease": section.lease}),
        );
        self.links.set_row(row, Mode::Blackhole);
        let cut = Instant::now();
        let probe = tokio::time::timeout(PROBE_WAIT, self.subject.try_acquire("partition-probe"));
        let probed = match probe.await {
            Err(_) => Ok(format!("a probe got no answer in {PROBE_WAIT:?}")),
            Ok(Err(e)) if !e.is_contended() => Ok(format!("a probe failed: {e}")),
            Ok(Err(e)) => Err(format!("a probe was answered: {e}")),
            Ok(Ok(grant)) => {
                let _ = grant.release().await;
                Err("a probe was granted through the partition".to_owned())
            }
        };
        while cut.elapsed() < stall.length {
            section.read_modify_write().await?;
            tokio::time::sleep(WORK_STEP).await;
        }
        let discarded = self.links.row_affected(row) - before;
        self.links.set_row(row, Mode::Pass);
        self.recorder.nemesis("heal", json!({}));
        self.stalled.store(true, Ordering::Release);
        let fault = format!(
            "partition client {} from every server for {:?}",
            self.id, stall.length
        );
        let lapsed = valid_until.is_none_or(|u| Instant::now() > u);
        Ok((
            fault,
            match probed {
                Ok(reading) if discarded > 0 && lapsed => Ok(format!(
                    "holding lease {}: {reading}; {discarded} bytes discarded",
                    section.lease
                )),
                Ok(reading) => Err(format!("{reading}, but {discarded} bytes discarded")),
                Err(reading) => Err(reading),
            },
        ))
    }
}

/// One critical section's accesses to the registers.
struct Section<'a> {
    worker: &'a Worker,
    store: &'a mut resource::Client,
    lease: &'a str,
    token: Option<u64>,
    op: &'a mut u64,
}

impl Section<'_> {
    /// The registers this subject writes: the fenced one only with a token.
    fn registers(&self) -> &'static [Register] {
        if self.token.is_some() {
            &[Register::Unfenced, Register::Fenced]
        } else {
            &[Register::Unfenced]
        }
    }

    async fn read_modify_write(&mut self) -> std::io::Result<()> {
        let read = self.read_all().await?;
        self.write_all(read).await
    }

    /// Reads at once and writes at `until`: a section the nemesis strikes inside.
    async fn read_hold_write(&mut self, until: Instant) -> std::io::Result<()> {
        let read = self.read_all().await?;
        tokio::time::sleep_until(until.into()).await;
        self.write_all(read).await
    }

    async fn read_all(&mut self) -> std::io::Result<Vec<(Register, u64, Vec<u64>)>> {
        let mut read = Vec::new();
        for &register in self.registers() {
            let answer = self.store.call(&self.request(Op::Read, register)).await?;
            if answer.accepted {
                read.push((register, answer.counter, answer.set));
            }
        }
        Ok(read)
    }

    async fn write_all(&mut self, read: Vec<(Register, u64, Vec<u64>)>) -> std::io::Result<()> {
        for (register, counter, mut set) in read {
            *self.op += 1;
            let add = (u64::from(self.worker.id) << 40) | *self.op;
            set.push(add);
            let mut request = self.request(Op::Write, register);
            request.counter = counter + 1;
            request.set = set;
            request.add = Some(add);
            let name = match register {
                Register::Unfenced => "unfenced",
                Register::Fenced => "fenced",
            };
            let answer = self.store.call(&request).await?;
            let value = json!({"lease": self.lease, "register": name, "counter": counter + 1,
                               "add": add});
            if answer.accepted {
                self.worker.log(Kind::Ok, "write", value, None);
            } else {
                self.worker.log(Kind::Fail, "write", value, answer.reason);
            }
        }
        Ok(())
    }

    fn request(&self, op: Op, register: Register) -> Request {
        Request {
            op,
            register,
            client: self.worker.id,
            lease: self.lease.to_owned(),
            token: self.token,
            counter: 0,
            set: Vec::new(),
            add: None,
        }
    }
}
