//! The data of one simulated master: strings and hashes, each with an optional expiry time in
//! milliseconds of the master's clock. Ordered maps only, so that every walk over the data is
//! the same on every run.
//!
//! Expiry follows Redis: a key is gone once the clock is strictly past its expiry time (at the
//! very millisecond it still exists, with a `PTTL` of 0), and it is removed when next touched
//! ([`Keyspace::purge_expired`] does what Redis's active expiry cycle does, all at once).

use std::collections::BTreeMap;

/// The reply text of an operation on a key holding the other type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A key's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// A string.
    Str(Vec<u8>),
    /// A hash of fields to values.
    Hash(Hash),
}

/// A key's value and when it expires (ms on the master's clock), if it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub data: Data,
    /// The expiry time, in milliseconds since the epoch of the master's clock.
    pub expires_at: Option<i64>,
}

/// A hash: fields to values.
pub type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

/// The operation met a key of the other type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// Every key of one master.
#[derive(Debug, Clone, Default)]
pub struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
}

impl Keyspace {
    /// The live entry of `key` at `now_ms`, removing it first if it expired.
    pub fn entry(&mut self, key: &[u8], now_ms: i64) -> Option<&mut Entry> {
        let expired = self
            .entries
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|at| now_ms > at));
        if expired {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Whether `key` is live at `now_ms`.
    pub fn exists(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.entry(key, now_ms).is_some()
    }

    /// The string at `key`, `None` if missing.
    ///
    /// # Errors
    ///
    /// [`WrongType`] if `key` holds a hash.
    pub fn string(&mut self, key: &[u8], now_ms: i64) -> Result<Option<&[u8]>, WrongType> {
        match self.entry(key, now_ms) {
            None => Ok(None),
            Some(Entry {
                data: Data::Str(s), ..
            }) => Ok(Some(s)),
            Some(_) => Err(WrongType),
        }
    }

    /// The hash at `key`, `None` if missing.
    ///
    /// # Errors
    ///
    /// [`WrongType`] if `key` holds a string.
    pub fn hash(&mut self, key: &[u8], now_ms: i64) -> Result<Option<&mut Hash>, WrongType> {
        match self.entry(key, now_ms) {
            None => Ok(None),
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(WrongType),
        }
    }

    /// The hash at `key`, created empty (without expiry) if missing.
    ///
    /// # Errors
    ///
    /// [`WrongType`] if `key` holds a string.
    pub fn hash_or_new(&mut self, key: &[u8], now_ms: i64) -> Result<&mut Hash, WrongType> {
        if self.entry(key, now_ms).is_none() {
            self.entries.insert(
                key.to_vec(),
                Entry {
                    data: Data::Hash(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        match self.entries.get_mut(key) {
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Ok(h),
            _ => Err(WrongType),
        }
    }

    /// Stores `entry` at `key`, whatever was there.
    pub fn put(&mut self, key: &[u8], entry: Entry) {
        self.entries.insert(key.to_vec(), entry);
    }

    /// Removes `key`; whether it was live.
    pub fn remove(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.entry(key, now_ms).is_some() && self.entries.remove(key).is_some()
    }

    /// Removes the hash at `key` if it has no field left, as Redis does after a field removal.
    pub fn drop_if_empty_hash(&mut self, key: &[u8]) {
        if let Some(Entry {
            data: Data::Hash(h),
            ..
        }) = self.entries.get(key)
        {
            if h.is_empty() {
                self.entries.remove(key);
            }
        }
    }

    /// Removes every expired key: what Redis's active expiry does over time.
    pub fn purge_expired(&mut self, now_ms: i64) {
        self.entries
            .retain(|_, e| e.expires_at.is_none_or(|at| now_ms <= at));
    }

    /// How many keys are stored, expired ones not yet removed included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The stored keys and entries, in key order (expired ones not yet removed included).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.entries.iter().map(|(k, e)| (k.as_slice(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(value: &str, expires_at: Option<i64>) -> Entry {
        Entry {
            data: Data::Str(value.as_bytes().to_vec()),
            expires_at,
        }
    }

    #[test]
    fn a_key_lives_through_its_expiry_millisecond_and_not_after() {
        let mut keys = Keyspace::default();
        keys.put(b"k", string("v", Some(1_000)));
        assert_eq!(keys.string(b"k", 999), Ok(Some(&b"v"[..])));
        assert_eq!(keys.string(b"k", 1_000), Ok(Some(&b"v"[..])));
        assert_eq!(keys.string(b"k", 1_001), Ok(None));
        // Gone for good: an earlier clock reading does not bring it back.
        assert_eq!(keys.string(b"k", 0), Ok(None));
        assert!(keys.is_empty());
    }

    #[test]
    fn types_are_kept_apart() {
        let mut keys = Keyspace::default();
        keys.put(b"s", string("v", None));
        assert_eq!(keys.hash(b"s", 0).map(|h| h.is_some()), Err(WrongType));
        assert!(keys.hash_or_new(b"s", 0).is_err());
        let h = keys.hash_or_new(b"h", 0).expect("new hash");
        h.insert(b"f".to_vec(), b"1".to_vec());
        assert_eq!(keys.string(b"h", 0), Err(WrongType));
        // A write of a string replaces a hash: SET has no type check.
        keys.put(b"h", string("w", None));
        assert_eq!(keys.string(b"h", 0), Ok(Some(&b"w"[..])));
    }

    #[test]
    fn an_emptied_hash_is_removed_and_expired_keys_are_purged() {
        let mut keys = Keyspace::default();
        keys.hash_or_new(b"h", 0).expect("new hash");
        keys.drop_if_empty_hash(b"h");
        assert!(!keys.exists(b"h", 0));
        keys.put(b"a", string("v", Some(5)));
        keys.put(b"b", string("v", Some(50)));
        keys.put(b"c", string("v", None));
        keys.purge_expired(10);
        let left: Vec<&[u8]> = keys.iter().map(|(k, _)| k).collect();
        assert_eq!(left, vec![&b"b"[..], &b"c"[..]]);
        assert!(!keys.remove(b"a", 10));
        assert!(keys.remove(b"b", 10));
    }
}
