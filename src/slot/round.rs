//! The quorum rounds of slot claims: claim (with the undo of a claim that did not win), record
//! how a run ended, and read a slot. The scripts are in `crate::scripts::slot`.
//!
//! Which answer wins when masters disagree (see the module docs of `crate::slot` for why):
//! completed (any master) > a quorum of grants (unless a master said abandoned and retries are
//! off) > one other claim standing on a quorum > abandoned; live claims of others that stand on
//! no quorum are a split vote between racing claimers, and are retried.
//!
//! A round that does not win hears every master (each within the node timeout) before it is
//! decided: it then knows where each claim stands, and it undoes its own claim only on the
//! masters that granted it or did not answer, never on those that refused it.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::outcome::SlotRecord;
use crate::clock;
use crate::config::Config;
use crate::error::{LockError, NodeErrorKind};
use crate::keys::RESERVED;
use crate::round::spec::RoundSpec;
use crate::round::tally::Tally;
use crate::round::timing::{quorum, validity};
use crate::round::{Holders, Nodes};
use crate::scripts::{CLAIM_SLOT, FINISH_SLOT, REVERT_SLOT, REVERT_SLOTS, SLOT_STATUS};
use crate::transport::node::RedisNode;
use crate::transport::reply::{flag_reply, unexpected};
use crate::transport::resp::{Decimal, Reply};
use crate::value::{Claim, LockValue};

/// The keys of one slot on every master.
#[derive(Debug, Clone)]
pub(crate) struct SlotKeys {
    /// The running claim: a lock key holding the claim's value.
    pub(crate) running: Arc<str>,
    /// The record (a hash), kept for the retention.
    pub(crate) record: Arc<str>,
    /// The fence counter of the resource `job`, on a fenced manager: slot runs and plain
    /// fenced locks on `job` draw tokens from one sequence, so a fenced store of the job
    /// orders them all, across slots.
    pub(crate) fence: Option<Arc<str>>,
    /// The epoch marker, under restart protection.
    pub(crate) epoch: Option<Arc<str>>,
}

impl SlotKeys {
    /// The keys of slot `slot` of `job` under `config`. The job's length is part of the key,
    /// so no `(job, slot)` pair can collide with another whatever bytes they contain.
    pub(crate) fn new(config: &Config, job: &str, slot: &str) -> Self {
        let prefix = &config.key_prefix;
        let name = format!("{}:{job}:{slot}", job.len());
        Self {
            running: Arc::from(format!("{prefix}{RESERVED}slot:{name}")),
            record: Arc::from(format!("{prefix}{RESERVED}slot-record:{name}")),
            fence: config
                .fencing
                .then(|| Arc::from(format!("{prefix}{RESERVED}fence:{job}"))),
            epoch: config
                .restart_protection
                .then(|| crate::keys::epoch_key(config)),
        }
    }
}

/// What one claim round needs besides the keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimSpec<'a> {
    pub(crate) resource: &'a str,
    pub(crate) timing: RoundSpec,
    pub(crate) retention: Duration,
    pub(crate) runner: &'a str,
    pub(crate) retry_abandoned: bool,
}

/// A claim that won a quorum.
#[derive(Debug)]
pub(crate) struct Won {
    pub(crate) claim: Claim,
    pub(crate) valid_until: Instant,
    pub(crate) holders: Holders,
    pub(crate) token: Option<u64>,
    pub(crate) token_on_quorum: bool,
    pub(crate) attempt: u32,
}

/// How one claim round ended.
#[derive(Debug)]
pub(crate) enum RoundOutcome {
    Won(Won),
    Completed(SlotRecord),
    Running(SlotRecord),
    Abandoned(SlotRecord),
    /// Some masters hold other live claims, none of them on a quorum of the masters that
    /// answered: a split vote between racing claimers (each undoes its claim), or a claim whose
    /// other masters did not answer. Worth another round.
    Split(Split),
    Failed(LockError),
}

/// A round that saw other live claims, none standing on a quorum.
#[derive(Debug)]
pub(crate) struct Split {
    /// The latest record among the masters holding another claim.
    pub(crate) record: SlotRecord,
    /// Whether one of those claims may stand on a quorum all the same: its masters and the
    /// masters that did not answer make a quorum.
    pub(crate) may_stand: bool,
    /// The error to report if no more rounds are tried ([`LockError::Contended`]).
    pub(crate) error: LockError,
}

/// What one master said to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Granted,
    Completed,
    Running,
    Abandoned,
}

#[derive(Debug)]
pub(crate) struct ClaimReply {
    code: Code,
    /// For [`Code::Running`]: which live claim (a hash of its value).
    holder: String,
    token: Option<u64>,
    epoch_age: Option<Duration>,
    record: SlotRecord,
}

/// Undoes a claim in the background when dropped while armed: the round's future was dropped
/// mid-flight, so any master may hold the claim.
struct RevertGuard<'a> {
    nodes: &'a Nodes<RedisNode>,
    keys: &'a SlotKeys,
    claim: &'a Claim,
    armed: bool,
}

impl Drop for RevertGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let all: Vec<bool> = self.nodes.iter().map(|_| true).collect();
            revert_in_background(self.nodes, self.keys, &self.claim.value, &all);
        }
    }
}

/// The arguments every slot of a claim request shares, as the scripts take them.
pub(crate) struct ClaimArgs {
    ttl: Decimal,
    fence_retention: Decimal,
    proposal: Decimal,
    cap: Decimal,
    retention: Decimal,
    fencing: bool,
    epoch_check: bool,
}

impl ClaimArgs {
    pub(crate) fn new(spec: &ClaimSpec<'_>, fencing: bool, epoch_check: bool) -> Self {
        let timing = spec.timing;
        Self {
            ttl: Decimal::new(millis(timing.ttl)),
            fence_retention: Decimal::new(millis(timing.fence_retention.max(timing.ttl))),
            proposal: Decimal::new(if fencing { timing.fence_proposal() } else { 0 }),
            cap: Decimal::new(u64::try_from(timing.fence_cap().as_micros()).unwrap_or(u64::MAX)),
            // A claim's record outlives the claim by the retention: a runner that dies at once
            // leaves a claim that runs out one TTL later, and its end is remembered from there.
            retention: Decimal::new(millis(spec.retention.saturating_add(timing.ttl))),
            fencing,
            epoch_check,
        }
    }

    /// `ttl, fencing, epoch, fence_retention, proposal, cap, retention, runner, retry`.
    pub(crate) fn shared<'a>(&'a self, spec: &ClaimSpec<'a>) -> [&'a [u8]; 9] {
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        [
            self.ttl.as_bytes(),
            flag(self.fencing),
            flag(self.epoch_check),
            self.fence_retention.as_bytes(),
            self.proposal.as_bytes(),
            self.cap.as_bytes(),
            self.retention.as_bytes(),
            spec.runner.as_bytes(),
            flag(spec.retry_abandoned),
        ]
    }
}

/// Where one slot stands in a claim round: every master's answer so far, and (once every
/// master answered or the claim won) the decision. A single claim and each slot of a batch
/// are tallied and decided by this one type, so a batch decides exactly as single claims do.
pub(crate) struct SlotTally {
    tally: Tally,
    needed: usize,
    n: usize,
    completed: Option<SlotRecord>,
    running: Vec<(String, SlotRecord)>,
    abandoned: Vec<SlotRecord>,
    attempt: u32,
    /// Masters whose answer is unknown (failed, timed out): they may hold any claim.
    unknown: usize,
}

impl SlotTally {
    pub(crate) fn new(nodes: &Nodes<RedisNode>, timing: &RoundSpec) -> Self {
        let needed = timing.quorum(nodes.len());
        Self {
            tally: Tally::new(nodes.iter().map(|_| true), needed),
            needed,
            n: nodes.len(),
            completed: None,
            running: Vec::new(),
            abandoned: Vec::new(),
            attempt: 0,
            unknown: 0,
        }
    }

    /// Whether a quorum granted the claim (so far).
    pub(crate) fn won(&self) -> bool {
        self.tally.won()
    }

    /// Records master `i`'s answer to the claim of the slot of `keys`.
    pub(crate) fn record(
        &mut self,
        nodes: &Nodes<RedisNode>,
        i: usize,
        keys: &SlotKeys,
        timing: &RoundSpec,
        reply: Result<ClaimReply, NodeErrorKind>,
    ) {
        let reply = match reply {
            Ok(reply) => reply,
            Err(kind) => {
                self.unknown += 1;
                self.tally.record_token(i, Err(kind), None);
                return;
            }
        };
        match reply.code {
            Code::Granted => match (
                timing.quarantine,
                with_life(nodes, i, keys, reply.epoch_age),
            ) {
                // Restart protection: this master may have forgotten claims and completions.
                // Its key is set (and undone), but its grant does not count.
                (Some(quarantine), Some(age)) if age < quarantine => self.tally.record_token(
                    i,
                    Err(NodeErrorKind::Quarantined {
                        age,
                        remaining: quarantine - age,
                    }),
                    None,
                ),
                _ => {
                    self.attempt = self.attempt.max(reply.record.attempts);
                    self.tally.record_token(i, Ok(true), reply.token);
                }
            },
            // A master that answers with a claim or a completion tells a fact about the past,
            // which no restart makes untrue: those answers count from every master.
            Code::Completed => {
                self.completed = Some(reply.record);
                self.tally.record_token(i, Ok(false), None);
            }
            Code::Running => {
                self.running.push((reply.holder, reply.record));
                self.tally.record_token(i, Ok(false), None);
            }
            Code::Abandoned => {
                self.abandoned.push(reply.record);
                self.tally.record_token(i, Ok(false), None);
            }
        }
    }

    /// The round's outcome for this slot, and the masters where its claim must be undone
    /// (`None` when it won: its keys are the caller's). `t0` is when the round started.
    pub(crate) fn decide(
        self,
        nodes: &Nodes<RedisNode>,
        spec: &ClaimSpec<'_>,
        claim: &Claim,
        t0: Instant,
        elapsed: Duration,
        fencing: bool,
    ) -> (RoundOutcome, Option<Arc<[bool]>>) {
        let Self {
            tally,
            needed,
            n,
            completed,
            running,
            abandoned,
            attempt,
            unknown,
        } = self;
        let timing = spec.timing;
        tracing::debug!(
            resource = spec.resource,
            granted = tally.yes,
            refused = tally.no,
            failed = tally.failed,
            completed = completed.is_some(),
            running = running.len(),
            abandoned = abandoned.len(),
            ?elapsed,
            "claim round decided"
        );
        let holders = tally.may_hold();
        if let Some(record) = completed {
            return (RoundOutcome::Completed(record), Some(holders));
        }
        let blocked = !spec.retry_abandoned && !abandoned.is_empty();
        if tally.won() && !blocked {
            let valid_until = validity(timing.ttl, timing.counted(elapsed), timing.drift())
                .and_then(|v| t0.checked_add(v + elapsed));
            return match valid_until {
                Some(valid_until) if !fencing || tally.max_token.is_some() => {
                    let won = Won {
                        claim: claim.clone(),
                        valid_until,
                        holders: Holders {
                            may_hold: Arc::clone(&holders),
                            confirmed: tally.yes_votes(),
                        },
                        token: tally.max_token,
                        token_on_quorum: tally.at_max_token >= tally.quorum,
                        attempt,
                    };
                    (RoundOutcome::Won(won), None)
                }
                _ => {
                    let error = LockError::ValidityExhausted {
                        resource: spec.resource.to_string(),
                        elapsed,
                        ttl: timing.ttl,
                        drift: timing.drift(),
                    };
                    (RoundOutcome::Failed(error), Some(holders))
                }
            };
        }
        // One live claim seen on a quorum stands: a quorum granted it. Live claims of several
        // claimers, none on a quorum, are a split vote: nobody won, each claimer undoes its
        // own, and reporting "running elsewhere" would leave the slot to nobody.
        let most = running
            .iter()
            .map(|(holder, _)| running.iter().filter(|(h, _)| h == holder).count())
            .max()
            .unwrap_or(0);
        let held_elsewhere = running.len();
        let seen_running = held_elsewhere > 0;
        let running = running.into_iter().map(|(_, record)| record).collect();
        let outcome = if most >= needed || (seen_running && !abandoned.is_empty()) {
            RoundOutcome::Running(latest(running))
        } else if !abandoned.is_empty() {
            RoundOutcome::Abandoned(latest(abandoned))
        } else if seen_running {
            RoundOutcome::Split(Split {
                record: latest(running),
                may_stand: most + unknown >= needed,
                error: LockError::Contended {
                    resource: spec.resource.to_string(),
                    held_elsewhere,
                    nodes: n,
                    quorum: needed,
                    failures: tally.failures(nodes),
                },
            })
        } else {
            RoundOutcome::Failed(tally.unreachable(nodes, spec.resource))
        };
        (outcome, Some(holders))
    }
}

/// One claim round: the claim script on every master at once, decided at the quorum-th grant
/// when it wins, else once every master answered or timed out. Whatever it may have set is
/// undone when it does not win (on the masters that granted it or did not answer), and on
/// every master if its future is dropped.
pub(crate) async fn claim(
    nodes: &Nodes<RedisNode>,
    keys: &SlotKeys,
    spec: ClaimSpec<'_>,
) -> (RoundOutcome, Option<JoinHandle<()>>) {
    let claim = Claim::fresh(None, None);
    let mut revert = RevertGuard {
        nodes,
        keys,
        claim: &claim,
        armed: true,
    };
    let fencing = keys.fence.is_some();
    let epoch_check = keys.epoch.is_some();
    let shared = ClaimArgs::new(&spec, fencing, epoch_check);
    let [ttl, fence_flag, epoch_flag, fence_retention, proposal, cap, retention, runner, retry] =
        shared.shared(&spec);
    let key_list = [
        keys.running.as_bytes(),
        keys.record.as_bytes(),
        keys.fence.as_deref().unwrap_or(&keys.running).as_bytes(),
        keys.epoch.as_deref().unwrap_or(&keys.running).as_bytes(),
    ];
    let args: [&[u8]; 10] = [
        claim.value.as_str().as_bytes(),
        ttl,
        fence_flag,
        epoch_flag,
        fence_retention,
        proposal,
        cap,
        retention,
        runner,
        retry,
    ];
    let (key_list, args) = (&key_list, &args);
    let n = nodes.len();
    let mut slot = SlotTally::new(nodes, &spec.timing);
    let mut answered = 0usize;
    // The lock clock counts a suspended machine, during which the keys keep expiring.
    let t0 = clock::now();
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| async move {
            let reply = node
                .run_script(&CLAIM_SLOT, key_list, args, false)
                .await
                .and_then(|(reply, _)| claim_reply(reply, fencing, epoch_check));
            (i, reply)
        })
        .collect();
    // A win is decided at once (the stragglers' grants are ours, and stay). Anything else waits
    // for every master: a refusal costs no undo, and where the other claims stand is known.
    // A straggler's `Completed` or `Abandoned` is then not heard: sound, since a run that held
    // the slot left its record on a quorum, which shares a master with this granting quorum
    // (see "Which answer wins" in `crate::slot`).
    while !slot.won() && answered < n {
        let Some((i, reply)) = requests.next().await else {
            break;
        };
        answered += 1;
        slot.record(nodes, i, keys, &spec.timing, reply);
    }
    drop(requests);
    let elapsed = clock::elapsed(t0);
    revert.armed = false;
    let (outcome, undo) = slot.decide(nodes, &spec, &claim, t0, elapsed, fencing);
    let cleanup =
        undo.and_then(|holders| revert_in_background(nodes, keys, &claim.value, &holders));
    (outcome, cleanup)
}

/// Restart protection's age of master `i` for a grant: the younger of its epoch marker (data
/// lost) and its current life (restarted, whatever it reloaded), as for a lock.
fn with_life(
    nodes: &Nodes<RedisNode>,
    i: usize,
    keys: &SlotKeys,
    marker: Option<Duration>,
) -> Option<Duration> {
    keys.epoch.as_ref()?;
    let since_restart = nodes.get(i).map_or(Some(Duration::ZERO), |node| {
        node.life_age(keys.running.as_bytes())
    });
    match (marker, since_restart) {
        (Some(marker), Some(restart)) => Some(marker.min(restart)),
        (marker, restart) => marker.or(restart),
    }
}

/// The record with the most attempts (the latest claim) among `records`.
fn latest(records: Vec<SlotRecord>) -> SlotRecord {
    records
        .into_iter()
        .max_by_key(|r| (r.attempts, r.updated))
        .unwrap_or_default()
}

/// Undoes the claim `value` on `holders` in a background task (see [`REVERT_SLOT`]). Each
/// request goes on the connection of the running key, behind the claim it undoes, and is
/// written even if nobody waits for it.
pub(crate) fn revert_in_background(
    nodes: &Nodes<RedisNode>,
    keys: &SlotKeys,
    value: &LockValue,
    holders: &[bool],
) -> Option<JoinHandle<()>> {
    let requests: FuturesUnordered<_> = nodes
        .iter()
        .zip(holders)
        .filter(|(_, holds)| **holds)
        .map(|(node, _)| {
            let node = Arc::clone(node);
            let (running, record) = (Arc::clone(&keys.running), Arc::clone(&keys.record));
            let value = value.clone();
            async move {
                let keys = [running.as_bytes(), record.as_bytes()];
                let args = [value.as_str().as_bytes()];
                let result = node.run_script(&REVERT_SLOT, &keys, &args, true).await;
                if let Err(error) = result {
                    use crate::round::master::Master;
                    tracing::debug!(node = %node.name(), %error, "undoing a slot claim failed; its key expires after its ttl, and its record reads as abandoned");
                }
            }
        })
        .collect();
    crate::round::finish_in_background(requests)
}

/// Undoes the claim `value` on `holders` in a background task like [`revert_in_background`],
/// but on the connection `route` picks (the connection a batch's claim travelled on, so that
/// the undo runs behind it; see [`REVERT_SLOTS`]).
pub(crate) fn revert_routed_in_background(
    nodes: &Nodes<RedisNode>,
    route: &Arc<str>,
    keys: &SlotKeys,
    value: &LockValue,
    holders: &[bool],
) -> Option<JoinHandle<()>> {
    if **route == *keys.running {
        return revert_in_background(nodes, keys, value, holders);
    }
    let requests: FuturesUnordered<_> = nodes
        .iter()
        .zip(holders)
        .filter(|(_, holds)| **holds)
        .map(|(node, _)| {
            let node = Arc::clone(node);
            let route = Arc::clone(route);
            let (running, record) = (Arc::clone(&keys.running), Arc::clone(&keys.record));
            let value = value.clone();
            async move {
                let keys = [route.as_bytes(), running.as_bytes(), record.as_bytes()];
                let args = [value.as_str().as_bytes()];
                let result = node.run_script(&REVERT_SLOTS, &keys, &args, true).await;
                if let Err(error) = result {
                    use crate::round::master::Master;
                    tracing::debug!(node = %node.name(), %error, "undoing a slot claim failed; its key expires after its ttl, and its record reads as abandoned");
                }
            }
        })
        .collect();
    crate::round::finish_in_background(requests)
}

/// How a run ended, for [`finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Completed,
    Abandoned,
}

/// What [`finish`] writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FinishSpec<'a> {
    pub(crate) resource: &'a str,
    pub(crate) ending: Ending,
    pub(crate) value: &'a LockValue,
    pub(crate) runner: &'a str,
    pub(crate) retention: Duration,
    pub(crate) token: Option<u64>,
    pub(crate) attempt: u32,
    /// Release the claim in the same script (when its lease keeps no minimum hold).
    pub(crate) release: bool,
}

impl FinishSpec<'_> {
    /// The script's release argument.
    pub(crate) fn release_flag(&self) -> &'static [u8] {
        if self.release {
            b"1"
        } else {
            b"0"
        }
    }
}

/// Records how a run ended on every master (see [`FINISH_SLOT`]): `Ok` once a quorum wrote it.
/// The requests still in flight then finish in the background, so a completion lands on every
/// master that can take it.
pub(crate) async fn finish(
    nodes: &Nodes<RedisNode>,
    keys: &SlotKeys,
    spec: FinishSpec<'_>,
) -> Result<(), LockError> {
    let ending: &[u8] = match spec.ending {
        Ending::Completed => b"completed",
        Ending::Abandoned => b"abandoned",
    };
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let node = Arc::clone(node);
            let (running, record) = (Arc::clone(&keys.running), Arc::clone(&keys.record));
            let (value, runner) = (spec.value.clone(), spec.runner.to_string());
            let retention = Decimal::new(millis(spec.retention));
            let token = Decimal::new(spec.token.unwrap_or(0));
            let attempt = Decimal::new(u64::from(spec.attempt));
            let release = spec.release_flag();
            async move {
                let keys = [running.as_bytes(), record.as_bytes()];
                let args: [&[u8]; 7] = [
                    value.as_str().as_bytes(),
                    ending,
                    runner.as_bytes(),
                    retention.as_bytes(),
                    token.as_bytes(),
                    attempt.as_bytes(),
                    release,
                ];
                let result = node
                    .run_script(&FINISH_SLOT, &keys, &args, false)
                    .await
                    .and_then(|(reply, _)| flag_reply(reply));
                (i, result)
            }
        })
        .collect();
    let mut tally = Tally::new(nodes.iter().map(|_| true), quorum(nodes.len()));
    tally.collect(&mut requests).await;
    crate::round::finish_in_background(requests);
    tracing::debug!(
        resource = spec.resource,
        ending = ?spec.ending,
        written = tally.yes,
        not_ours = tally.no,
        failed = tally.failed,
        "slot ending recorded"
    );
    if tally.won() {
        return Ok(());
    }
    Err(tally.holder_error(nodes, spec.resource))
}

/// What one master says about a slot, for [`status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Seen {
    Free,
    Abandoned,
    Running,
    Completed,
}

/// Reads a slot on every master (waiting at most the node timeout for each): the strongest
/// answer (completed > running > abandoned > free) and its record, once a quorum answered.
pub(crate) async fn status(
    nodes: &Nodes<RedisNode>,
    keys: &SlotKeys,
    resource: &str,
) -> Result<(Seen, SlotRecord), LockError> {
    let key_list = [keys.running.as_bytes(), keys.record.as_bytes()];
    let key_list = &key_list;
    let answers = futures::future::join_all(nodes.iter().map(|node| async move {
        node.run_script(&SLOT_STATUS, key_list, &[], false)
            .await
            .and_then(|(reply, _)| status_reply(reply))
    }))
    .await;
    let mut tally = Tally::new(nodes.iter().map(|_| true), quorum(nodes.len()));
    let mut best: Option<(Seen, SlotRecord)> = None;
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok((seen, record)) => {
                tally.record_token(i, Ok(true), None);
                let better = best.as_ref().is_none_or(|(s, r)| {
                    (seen, record.attempts, record.updated) > (*s, r.attempts, r.updated)
                });
                if better {
                    best = Some((seen, record));
                }
            }
            Err(kind) => tally.record_token(i, Err(kind), None),
        }
    }
    match best {
        Some(best) if tally.won() => Ok(best),
        _ => Err(tally.unreachable(nodes, resource)),
    }
}

/// Milliseconds for `PX`/`PEXPIRE`; durations are validated to fit long before this.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Reads the claim script's `{code, token, epoch_age_ms, attempts, record_token, runner,
/// updated_us, holder}`.
pub(crate) fn claim_reply(
    value: Reply,
    fencing: bool,
    epoch_check: bool,
) -> Result<ClaimReply, NodeErrorKind> {
    const EXPECTED: &str =
        "an array {code, token, epoch_age_ms, attempts, record_token, runner, updated_us, holder}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(code), Reply::Int(token), Reply::Int(age), rest @ ..] = items.as_slice() else {
        return Err(unexpected(EXPECTED, &value));
    };
    let code = match code {
        1 => Code::Granted,
        2 => Code::Completed,
        3 => Code::Running,
        4 => Code::Abandoned,
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let [record @ .., Reply::Bulk(holder)] = rest else {
        return Err(unexpected(EXPECTED, &value));
    };
    let record = record_of(record).ok_or_else(|| unexpected(EXPECTED, &value))?;
    let holder = String::from_utf8_lossy(holder).into_owned();
    let token = match (code == Code::Granted && fencing, u64::try_from(*token)) {
        (false, _) => None,
        (true, Ok(token)) if token > 0 => Some(token),
        (true, _) => return Err(unexpected("a positive fencing token", &value)),
    };
    let epoch_age = match (epoch_check, u64::try_from(*age)) {
        (false, _) => None,
        (true, Ok(ms)) => Some(Duration::from_millis(ms)),
        // A marker "from the future" (the master's clock went backwards): brand new.
        (true, Err(_)) => Some(Duration::ZERO),
    };
    Ok(ClaimReply {
        code,
        holder,
        token,
        epoch_age,
        record,
    })
}

/// Reads the status script's `{code, attempts, token, runner, updated_us}`.
fn status_reply(value: Reply) -> Result<(Seen, SlotRecord), NodeErrorKind> {
    const EXPECTED: &str = "an array {code, attempts, token, runner, updated_us}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(code), rest @ ..] = items.as_slice() else {
        return Err(unexpected(EXPECTED, &value));
    };
    let seen = match code {
        0 => Seen::Free,
        1 => Seen::Running,
        2 => Seen::Completed,
        4 => Seen::Abandoned,
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let record = record_of(rest).ok_or_else(|| unexpected(EXPECTED, &value))?;
    Ok((seen, record))
}

/// `{attempts, token, runner, updated_us}` as a record; `None` if malformed.
fn record_of(items: &[Reply]) -> Option<SlotRecord> {
    let [Reply::Int(attempts), Reply::Int(token), runner, Reply::Int(updated)] = items else {
        return None;
    };
    let runner = match runner {
        Reply::Bulk(bytes) if bytes.is_empty() => None,
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => return None,
    };
    Some(SlotRecord {
        runner,
        token: u64::try_from(*token).ok().filter(|t| *t > 0),
        attempts: u32::try_from(*attempts).unwrap_or(0),
        updated: u64::try_from(*updated)
            .ok()
            .filter(|us| *us > 0)
            .and_then(|us| UNIX_EPOCH.checked_add(Duration::from_micros(us))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        let ok = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(42),
            Reply::Int(-1),
            Reply::Int(2),
            Reply::Int(42),
            Reply::Bulk(b"host:1".to_vec()),
            Reply::Int(1_000_000),
            Reply::Bulk(Vec::new()),
        ]);
        let reply = claim_reply(ok, true, false).expect("valid");
        assert_eq!(reply.code, Code::Granted);
        assert_eq!(reply.token, Some(42));
        assert_eq!(reply.epoch_age, None);
        assert_eq!(reply.record.attempts, 2);
        assert_eq!(reply.record.runner.as_deref(), Some("host:1"));
        assert_eq!(
            reply.record.updated,
            UNIX_EPOCH.checked_add(Duration::from_secs(1))
        );
        for bad in [
            Reply::Nil,
            Reply::Array(vec![Reply::Int(9), Reply::Int(0), Reply::Int(0)]),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(1),
                Reply::Int(0),
                Reply::Bulk(Vec::new()),
                Reply::Int(0),
                Reply::Bulk(Vec::new()),
            ]),
        ] {
            assert!(claim_reply(bad, true, false).is_err());
        }
        let free = Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(0),
            Reply::Bulk(Vec::new()),
            Reply::Int(0),
        ]);
        assert_eq!(status_reply(free), Ok((Seen::Free, SlotRecord::default())));
        assert!(status_reply(Reply::Array(vec![Reply::Int(3)])).is_err());
    }
}
