//! The keys quorumlock writes on each master, named in one place: a resource's lock key, and
//! the keys kept beside the locks (fence counters, reentrant holds, an election's announcement,
//! a slot's running key and record, the epoch marker and the provisioning record of restart
//! protection).
//!
//! Every key starts with the manager's `key_prefix`. The keys beside the locks continue with
//! [`RESERVED`], a byte no resource name may start with, so no resource can collide with them.

use std::sync::Arc;

use crate::config::Config;
use crate::error::InvalidArgument;
use crate::round::LockKeys;
pub(crate) use crate::scripts::slot_keys::SlotKeys;

/// Resource names may not start with this byte (ASCII unit separator): the keys quorumlock
/// keeps next to the locks start with it after the prefix.
pub(crate) const RESERVED: char = '\u{1f}';

/// The keys of `resource` under `config`: its lock key, and the fence counter, epoch marker
/// and reentrant holds when those features are on.
///
/// # Errors
///
/// [`InvalidArgument::EmptyResource`] and [`InvalidArgument::ReservedResource`].
pub(crate) fn lock_keys(config: &Config, resource: &str) -> Result<LockKeys, InvalidArgument> {
    check_resource(resource)?;
    let prefix = &config.key_prefix;
    Ok(LockKeys {
        lock: Arc::from(format!("{prefix}{resource}")),
        fence: config.fencing.then(|| fence_key(prefix, resource)),
        epoch: config.restart_protection.then(|| epoch_key(config)),
        reentrant: config.owner.as_ref().map(|owner| {
            let holds = Arc::from(format!("{prefix}{RESERVED}holds:{resource}"));
            (owner.clone(), holds)
        }),
        blocker: None,
    })
}

/// Whether `resource` may be a resource's name: not empty, not starting with [`RESERVED`].
///
/// # Errors
///
/// [`InvalidArgument::EmptyResource`] and [`InvalidArgument::ReservedResource`].
fn check_resource(resource: &str) -> Result<(), InvalidArgument> {
    if resource.is_empty() {
        return Err(InvalidArgument::EmptyResource);
    }
    if resource.starts_with(RESERVED) {
        return Err(InvalidArgument::ReservedResource);
    }
    Ok(())
}

/// The fence counter of `resource`: the tokens of its locks, and of the slots of the job of
/// that name, come from this one sequence.
/// What a permit key belongs to: a semaphore, or the readers of a read-write lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PermitOf {
    /// A semaphore's permit.
    Semaphore,
    /// A read-write lock's read permit.
    Readers,
}

/// The keys of the `count` permits of `name`: for permit `i`, a lock key, fence counter and
/// epoch marker as for a resource, under a reserved name (`<prefix>\x1fpermit:<i>:<name>` for a
/// semaphore, `<prefix>\x1fread:<i>:<name>` for a read-write lock's readers; the index first so
/// no two names collide) that no resource can take. A permit is never reentrant. The name is
/// checked, and the epoch marker's key written, once for all of them: a writer makes
/// [`limits::MAX_PERMITS`](crate::limits::MAX_PERMITS) at each call.
///
/// # Errors
///
/// As [`lock_keys`], for `name`.
pub(crate) fn permit_keys(
    config: &Config,
    of: PermitOf,
    name: &str,
    count: usize,
) -> Result<Vec<LockKeys>, InvalidArgument> {
    check_resource(name)?;
    let prefix = &config.key_prefix;
    let kind = match of {
        PermitOf::Semaphore => "permit",
        PermitOf::Readers => "read",
    };
    let epoch = config.restart_protection.then(|| epoch_key(config));
    Ok((0..count)
        .map(|index| {
            let resource = format!("{RESERVED}{kind}:{index}:{name}");
            LockKeys {
                lock: Arc::from(format!("{prefix}{resource}")),
                fence: config.fencing.then(|| fence_key(prefix, &resource)),
                epoch: epoch.clone(),
                reentrant: None,
                blocker: None,
            }
        })
        .collect())
}

/// The keys of the writer intent of read-write lock `name`
/// (`<prefix>\x1fwrite-intent:<name>`): a plain lock a writer holds while it waits for the
/// readers to leave, which refuses new readers meanwhile. Never fenced, never reentrant.
///
/// # Errors
///
/// As [`lock_keys`], for `name`.
pub(crate) fn writer_intent_keys(config: &Config, name: &str) -> Result<LockKeys, InvalidArgument> {
    lock_keys(config, name)?;
    let prefix = &config.key_prefix;
    Ok(LockKeys {
        lock: Arc::from(format!("{prefix}{RESERVED}write-intent:{name}")),
        fence: None,
        epoch: config.restart_protection.then(|| epoch_key(config)),
        reentrant: None,
        blocker: None,
    })
}

fn fence_key(prefix: &str, resource: &str) -> Arc<str> {
    Arc::from(format!("{prefix}{RESERVED}fence:{resource}"))
}

/// The epoch marker key of a manager's key prefix (restart protection).
pub(crate) fn epoch_key(config: &Config) -> Arc<str> {
    Arc::from(format!("{}{RESERVED}epoch", config.key_prefix))
}

/// The provisioning record under `key_prefix`: the `run_id` of the master's life that
/// [`Redlock::provision`](crate::Redlock::provision) vouched for (restart protection).
pub(crate) fn record_key(key_prefix: &str) -> Arc<str> {
    Arc::from(format!("{key_prefix}{RESERVED}provisioned"))
}

/// The key beside an election's lock that carries the leader's token.
pub(crate) fn announcement_key(prefix: &str, name: &str) -> Arc<str> {
    Arc::from(format!("{prefix}{RESERVED}leader:{name}"))
}

/// The keys of slot `slot` of `job` under `config`. The job's length is part of the key, so
/// no `(job, slot)` pair can collide with another whatever bytes they contain.
pub(crate) fn slot_keys(config: &Config, job: &str, slot: &str) -> SlotKeys {
    let prefix = &config.key_prefix;
    let name = format!("{}:{job}:{slot}", job.len());
    SlotKeys {
        running: Arc::from(format!("{prefix}{RESERVED}slot:{name}")),
        record: Arc::from(format!("{prefix}{RESERVED}slot-record:{name}")),
        fence: config.fencing.then(|| fence_key(prefix, job)),
        epoch: config.restart_protection.then(|| epoch_key(config)),
    }
}
