//! The masters of one run: `N` independent `redis-server` processes, each with its own
//! persistence (a composed run mixes them, so that every restart kind has a node to act on).

use std::ops::{Index, IndexMut};

use quorumlock_testkit::{MasterOptions, Persistence, RedisCluster, RedisMaster, TestingError};

/// The masters of a run, by index. Dropping them kills every process (paused ones too).
#[derive(Debug)]
pub enum Masters {
    /// All with the same options, started together.
    Uniform(RedisCluster),
    /// Each with its own options.
    Mixed(Vec<RedisMaster>),
}

impl Masters {
    /// Starts `n` masters with `persistence`.
    ///
    /// # Errors
    ///
    /// When a server cannot be started.
    pub fn uniform(n: usize, persistence: Persistence) -> Result<Self, TestingError> {
        let opts = MasterOptions::new().persistence(persistence);
        RedisCluster::start_with(n, opts).map(Self::Uniform)
    }

    /// Starts one master per entry of `persistence`.
    ///
    /// # Errors
    ///
    /// When a server cannot be started (those already started are killed).
    pub fn mixed(persistence: &[Persistence]) -> Result<Self, TestingError> {
        persistence
            .iter()
            .map(|&p| RedisMaster::start(MasterOptions::new().persistence(p)))
            .collect::<Result<Vec<_>, _>>()
            .map(Self::Mixed)
    }

    fn slice(&self) -> &[RedisMaster] {
        match self {
            Self::Uniform(c) => c.masters(),
            Self::Mixed(v) => v,
        }
    }

    /// How many masters.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The masters' ports, by index.
    pub fn ports(&self) -> Vec<u16> {
        self.slice().iter().map(RedisMaster::port).collect()
    }

    /// Every master.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisMaster> {
        self.slice().iter()
    }

    /// What master `n` keeps on disk.
    pub fn persistence(&self, n: usize) -> Persistence {
        self.slice()
            .get(n)
            .map_or(Persistence::None, |m| m.options().persistence)
    }
}

impl Index<usize> for Masters {
    type Output = RedisMaster;

    fn index(&self, n: usize) -> &RedisMaster {
        &self.slice()[n]
    }
}

impl IndexMut<usize> for Masters {
    fn index_mut(&mut self, n: usize) -> &mut RedisMaster {
        match self {
            Self::Uniform(c) => &mut c[n],
            Self::Mixed(v) => &mut v[n],
        }
    }
}
