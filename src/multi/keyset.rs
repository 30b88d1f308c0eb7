//! A set of lock keys seen as one: the keys of a lock set (or of an election), and the
//! [`Master`] that acquires, extends and releases them together on one master.
//!
//! The quorum round ([`crate::round`]) is written against one [`Master`] and one key. Rather
//! than a second round for sets, a [`SetNode`] presents a whole set as that one key: the
//! round's fan-out, early decision, tally, validity maths, fencing write-back and cleanup of
//! failed, cancelled and late requests all apply unchanged. The key the round passes is the
//! set's first lock key; the node ignores it and sends the whole set.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::error::{InvalidArgument, NodeErrorKind};
use crate::keys::lock_keys;
use crate::limits;
use crate::round::master::{AcquireReply, AcquireRequest, Master};
use crate::round::{LockKeys, Nodes};
use crate::scripts::SetAcquire;
use crate::transport::node::RedisNode;
use crate::value::Ownership;

/// Separates the random part of a lock value from the identity an election stores after it.
/// The random part is always 32 hex digits, so the identity starts at byte 33 whatever it
/// contains.
pub(crate) const IDENTITY_SEPARATOR: char = ':';

/// The keys of a set of resources, sorted by key.
#[derive(Debug)]
pub(crate) struct KeySet {
    /// The resource names, in the order of `locks`.
    pub(crate) resources: Vec<String>,
    /// The lock keys, sorted: every request about the set names the first one first, so they
    /// all share its connection.
    locks: Vec<Arc<str>>,
    /// The fence counters, in the same order, when fencing is on.
    fences: Option<Vec<Arc<str>>>,
    /// The epoch marker, when restart protection is on.
    epoch: Option<Arc<str>>,
    /// Keys released and extended with the set but not part of the ownership (an election's
    /// announcement).
    pub(crate) extras: Vec<Arc<str>>,
    /// Written after the random value (an election's identity), so others can read it.
    identity: Option<Arc<str>>,
}

impl KeySet {
    /// The keys of `resources` under `config`, sorted by key.
    ///
    /// # Errors
    ///
    /// No resource, too many, an empty or reserved name, or a name given twice.
    pub(crate) fn new<S: AsRef<str>>(
        config: &Config,
        resources: &[S],
    ) -> Result<Self, InvalidArgument> {
        if resources.is_empty() {
            return Err(InvalidArgument::NoResources);
        }
        if resources.len() > limits::MAX_SET_SIZE {
            return Err(InvalidArgument::TooManyResources {
                count: resources.len(),
                max: limits::MAX_SET_SIZE,
            });
        }
        let entries = resources
            .iter()
            .map(|r| lock_keys(config, r.as_ref()).map(|keys| (r.as_ref().to_string(), keys)))
            .collect::<Result<Vec<_>, _>>()?;
        Self::of_keys(entries)
    }

    /// The set of the keys in `entries` (a label and the keys of each), sorted by key: for sets
    /// whose keys are not a resource's (a read-write lock's read permits).
    ///
    /// # Errors
    ///
    /// The same key given twice ([`InvalidArgument::DuplicateResource`], with its label).
    pub(crate) fn of_keys(mut entries: Vec<(String, LockKeys)>) -> Result<Self, InvalidArgument> {
        // One global order (by key) is what makes sets deadlock-free whatever order callers
        // name them in; the script is atomic anyway, but sorting also gives every caller the
        // same first key, and so the same connection for the set's requests.
        entries.sort_by(|a, b| a.1.lock.cmp(&b.1.lock));
        if let Some(pair) = entries.windows(2).find(|w| w[0].1.lock == w[1].1.lock) {
            return Err(InvalidArgument::DuplicateResource(pair[0].0.clone()));
        }
        let epoch = entries.first().and_then(|(_, keys)| keys.epoch.clone());
        let fences = entries
            .iter()
            .map(|(_, keys)| keys.fence.clone())
            .collect::<Option<Vec<_>>>();
        Ok(Self {
            resources: entries.iter().map(|(r, _)| r.clone()).collect(),
            locks: entries
                .iter()
                .map(|(_, keys)| Arc::clone(&keys.lock))
                .collect(),
            fences,
            epoch,
            extras: Vec::new(),
            identity: None,
        })
    }

    /// The same set, storing `identity` after the random value.
    pub(crate) fn with_identity(mut self, identity: &str) -> Self {
        self.identity = Some(Arc::from(identity));
        self
    }

    /// The keys the round sees: the first lock key and fence counter stand for the set.
    pub(crate) fn round_keys(&self) -> LockKeys {
        LockKeys {
            lock: Arc::clone(&self.locks[0]),
            fence: self.fences.as_ref().map(|f| Arc::clone(&f[0])),
            epoch: self.epoch.clone(),
            reentrant: None,
            blocker: None,
        }
    }

    /// The lock keys, sorted.
    pub(crate) fn locks(&self) -> &[Arc<str>] {
        &self.locks
    }

    /// The first lock key (the set's connection, and an election's lock key).
    pub(crate) fn first_lock(&self) -> &Arc<str> {
        &self.locks[0]
    }

    /// The value stored for `ownership`: its random value, then the identity if any.
    pub(crate) fn value(&self, ownership: &Ownership) -> String {
        match &self.identity {
            Some(identity) => format!("{}{IDENTITY_SEPARATOR}{identity}", ownership.value.as_str()),
            None => ownership.value.as_str().to_string(),
        }
    }

    /// Lock keys, then extras: what release and extend send.
    fn all_keys(&self) -> Vec<&str> {
        let extras = self.extras.iter();
        self.locks.iter().chain(extras).map(|k| &**k).collect()
    }

    /// The set's names for errors and traces: `a, b, c`.
    pub(crate) fn label(&self) -> String {
        self.resources.join(", ")
    }
}

/// The identity stored in a lock value by an election, if any: what follows the 32 random hex
/// digits and the separator.
pub(crate) fn identity_of(value: &str) -> Option<&str> {
    let (random, rest) = value.split_at_checked(32)?;
    if !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    rest.strip_prefix(IDENTITY_SEPARATOR)
        .filter(|identity| !identity.is_empty())
}

/// One master, acquiring, extending and releasing a whole [`KeySet`] in one script each.
pub(crate) struct SetNode {
    node: Arc<RedisNode>,
    set: Arc<KeySet>,
}

impl SetNode {
    /// Deletes the set where it holds `ownership`'s value; publishes the release only when
    /// `announce` (a held set's release, never a failed round's cleanup).
    async fn delete(&self, ownership: &Ownership, announce: bool) -> Result<bool, NodeErrorKind> {
        let value = self.set.value(ownership);
        let keys = self.set.all_keys();
        self.node
            .release_set(&keys, self.set.locks.len(), &value, announce)
            .await
    }
}

/// The masters of `nodes`, each presenting `set` as one key.
pub(crate) fn nodes_of_set(nodes: &Nodes<RedisNode>, set: &Arc<KeySet>) -> Nodes<SetNode> {
    nodes
        .iter()
        .map(|node| {
            Arc::new(SetNode {
                node: Arc::clone(node),
                set: Arc::clone(set),
            })
        })
        .collect()
}

impl Master for SetNode {
    fn name(&self) -> &str {
        self.node.name()
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply, NodeErrorKind> {
        let set = &self.set;
        let locks: Vec<&str> = set.locks.iter().map(|k| &**k).collect();
        let fences: Option<Vec<&str>> = set
            .fences
            .as_ref()
            .filter(|_| request.fence_key.is_some())
            .map(|f| f.iter().map(|k| &**k).collect());
        let value = set.value(request.ownership);
        let acquire = SetAcquire {
            locks: &locks,
            fences: fences.as_deref(),
            epoch: request.epoch_key,
            value: &value,
            ttl: request.ttl,
            fence_retention: request.fence_retention,
            fence_proposal: request.fence_proposal,
            fence_cap: request.fence_cap,
        };
        self.node.acquire_set(acquire).await
    }

    async fn raise_fence(
        &self,
        _fence_key: &str,
        token: u64,
        retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let fences: Vec<&str> = match &self.set.fences {
            Some(fences) => fences.iter().map(|k| &**k).collect(),
            None => return Ok(true),
        };
        self.node.raise_set_fences(&fences, token, retention).await
    }

    async fn compare_and_delete(
        &self,
        _key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        // The mutant's cleanup announces, as it once did: a waiter wakes itself.
        let announce = self.node.mutant() == Some(crate::mutant::Mutant::SetCleanupAnnounces);
        self.delete(ownership, announce).await
    }

    async fn release_and_announce(
        &self,
        _key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        self.delete(ownership, true).await
    }

    async fn compare_and_pexpire(
        &self,
        _key: &str,
        ownership: &Ownership,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let value = self.set.value(ownership);
        let keys = self.set.all_keys();
        self.node
            .extend_set(&keys, self.set.locks.len(), &value, ttl)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(fencing: bool) -> Config {
        let (mut config, _) = crate::RedlockBuilder::default()
            .nodes(["redis://127.0.0.1:1"])
            .validate()
            .expect("valid settings");
        config.fencing = fencing;
        config
    }

    #[test]
    fn sets_are_sorted_by_key_and_checked() {
        let set = KeySet::new(&config(true), &["b", "c", "a"]).expect("valid");
        assert_eq!(set.resources, ["a", "b", "c"]);
        let keys = set.round_keys();
        assert_eq!(&*keys.lock, "quorumlock:a");
        assert_eq!(keys.fence.as_deref(), Some("quorumlock:\u{1f}fence:a"));
        // Whatever order the caller names them in, the same first key (the same connection).
        let other = KeySet::new(&config(true), &["c", "a", "b"]).expect("valid");
        assert_eq!(other.first_lock(), set.first_lock());
        let plain = KeySet::new(&config(false), &["a"]).expect("valid");
        assert!(plain.round_keys().fence.is_none());

        let none: [&str; 0] = [];
        assert_eq!(
            KeySet::new(&config(false), &none).err(),
            Some(InvalidArgument::NoResources)
        );
        assert_eq!(
            KeySet::new(&config(false), &["x", "y", "x"]).err(),
            Some(InvalidArgument::DuplicateResource("x".into()))
        );
        let many: Vec<String> = (0..=limits::MAX_SET_SIZE).map(|i| i.to_string()).collect();
        assert!(matches!(
            KeySet::new(&config(false), &many).err(),
            Some(InvalidArgument::TooManyResources { count, .. }) if count == limits::MAX_SET_SIZE + 1
        ));
    }

    #[test]
    fn an_identity_follows_the_random_value_and_reads_back() {
        let set = KeySet::new(&config(false), &["leader"])
            .expect("valid")
            .with_identity("host-a");
        let ownership = Ownership::fresh(None, None);
        let value = set.value(&ownership);
        assert!(value.starts_with(ownership.value.as_str()), "{value}");
        assert_eq!(identity_of(&value), Some("host-a"));
    }

    #[test]
    fn identities_are_read_after_the_random_part_only() {
        let random = "0123456789abcdef0123456789abcdef";
        assert_eq!(identity_of(random), None);
        assert_eq!(identity_of(&format!("{random}:")), None);
        assert_eq!(identity_of(&format!("{random}:node-1")), Some("node-1"));
        assert_eq!(identity_of(&format!("{random}:a:b")), Some("a:b"));
        assert_eq!(identity_of(&format!("{random}-node-1")), None);
        assert_eq!(identity_of("short:x"), None);
        assert_eq!(identity_of("zz23456789abcdef0123456789abcdef:x"), None);
        // Not on a character boundary: no panic.
        assert_eq!(identity_of(&format!("{}é:x", &random[..31])), None);
    }
}
