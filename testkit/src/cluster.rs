//! N independent masters: what Redlock runs on.

use std::ops::{Index, IndexMut};

use super::{MasterOptions, RedisMaster, TestingError};

/// `n` independent [`RedisMaster`]s, with no replication between them, each on its own port
/// and data directory. Dropping the cluster kills every master.
///
/// Masters are reached by index, in the order of [`urls`](Self::urls): `cluster[0].pause()?`.
#[derive(Debug)]
pub struct RedisCluster {
    masters: Vec<RedisMaster>,
}

impl RedisCluster {
    /// Starts `n` masters without persistence and waits until each answers `PING`.
    ///
    /// # Errors
    ///
    /// As [`RedisMaster::start`]; masters already started are killed.
    pub fn start(n: usize) -> Result<Self, TestingError> {
        Self::start_with(n, MasterOptions::default())
    }

    /// Starts `n` masters with the same options and waits until each answers `PING`. The
    /// processes are spawned together and then waited for, so that the cluster starts in about
    /// the time of one server.
    ///
    /// # Errors
    ///
    /// As [`RedisMaster::start`]; masters already started are killed.
    pub fn start_with(n: usize, opts: MasterOptions) -> Result<Self, TestingError> {
        let mut masters = (0..n)
            .map(|_| RedisMaster::launch(opts.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        for master in &mut masters {
            master.finish_start()?;
        }
        Ok(Self { masters })
    }

    /// The masters' URLs, `redis://127.0.0.1:PORT`, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(RedisMaster::url).collect()
    }

    /// The masters' ports, in index order.
    pub fn ports(&self) -> Vec<u16> {
        self.masters.iter().map(RedisMaster::port).collect()
    }

    /// The number of masters.
    pub fn len(&self) -> usize {
        self.masters.len()
    }

    /// Whether the cluster has no masters.
    pub fn is_empty(&self) -> bool {
        self.masters.is_empty()
    }

    /// The master at `index`, or `None` if out of bounds.
    pub fn get(&self, index: usize) -> Option<&RedisMaster> {
        self.masters.get(index)
    }

    /// The master at `index` for faults and restarts, or `None` if out of bounds.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut RedisMaster> {
        self.masters.get_mut(index)
    }

    /// The masters, in index order.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisMaster> {
        self.masters.iter()
    }

    /// The masters, mutably, in index order.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, RedisMaster> {
        self.masters.iter_mut()
    }

    /// The masters as a slice.
    pub fn masters(&self) -> &[RedisMaster] {
        &self.masters
    }
}

impl Index<usize> for RedisCluster {
    type Output = RedisMaster;

    /// The master at `index`.
    ///
    /// # Panics
    ///
    /// Panics if `index >= self.len()`, like slice indexing; [`RedisCluster::get`] does not.
    fn index(&self, index: usize) -> &RedisMaster {
        &self.masters[index]
    }
}

impl IndexMut<usize> for RedisCluster {
    /// The master at `index`, mutably.
    ///
    /// # Panics
    ///
    /// Panics if `index >= self.len()`, like slice indexing; [`RedisCluster::get_mut`] does not.
    fn index_mut(&mut self, index: usize) -> &mut RedisMaster {
        &mut self.masters[index]
    }
}

impl<'a> IntoIterator for &'a RedisCluster {
    type Item = &'a RedisMaster;
    type IntoIter = std::slice::Iter<'a, RedisMaster>;

    fn into_iter(self) -> Self::IntoIter {
        self.masters.iter()
    }
}

impl<'a> IntoIterator for &'a mut RedisCluster {
    type Item = &'a mut RedisMaster;
    type IntoIter = std::slice::IterMut<'a, RedisMaster>;

    fn into_iter(self) -> Self::IntoIter {
        self.masters.iter_mut()
    }
}

impl From<Vec<RedisMaster>> for RedisCluster {
    /// A cluster of masters started separately, e.g. with different options each.
    fn from(masters: Vec<RedisMaster>) -> Self {
        Self { masters }
    }
}
