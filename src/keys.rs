//! The keys quorumlock writes on each master, named in one place: a resource's lock key, and
//! the keys kept beside the locks (fence counters, reentrant holds, the epoch marker and the
//! provisioning record of restart protection).
//!
//! Every key starts with the manager's `key_prefix`. The keys beside the locks continue with
//! [`RESERVED`], a byte no resource name may start with, so no resource can collide with them.

use std::sync::Arc;

use crate::config::Config;
use crate::error::InvalidArgument;
use crate::round::LockKeys;

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
    if resource.is_empty() {
        return Err(InvalidArgument::EmptyResource);
    }
    if resource.starts_with(RESERVED) {
        return Err(InvalidArgument::ReservedResource);
    }
    let prefix = &config.key_prefix;
    Ok(LockKeys {
        lock: Arc::from(format!("{prefix}{resource}")),
        fence: config
            .fencing
            .then(|| Arc::from(format!("{prefix}{RESERVED}fence:{resource}"))),
        epoch: config.restart_protection.then(|| epoch_key(config)),
        reentrant: config.owner.as_ref().map(|owner| {
            let holds = Arc::from(format!("{prefix}{RESERVED}holds:{resource}"));
            (owner.clone(), holds)
        }),
    })
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
