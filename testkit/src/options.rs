//! How a master is configured: persistence and extra `redis-server` arguments.

use std::fmt;
use std::path::PathBuf;

/// What a master keeps on disk, which decides what survives a [`kill`](super::RedisMaster::kill)
/// followed by a [`restart`](super::RedisMaster::restart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// Nothing: `--save "" --appendonly no`. A restart comes back empty.
    #[default]
    None,
    /// An append-only file fsynced once a second: `--appendonly yes --appendfsync everysec`.
    /// A `SIGKILL` loses nothing (writes sit in the page cache); only power loss, emulated by
    /// truncating the AOF in [`dir`](super::RedisMaster::dir), loses the last second.
    AofEverySec,
    /// An append-only file fsynced before every reply: `--appendonly yes --appendfsync always`.
    AofAlways,
}

impl Persistence {
    /// The `redis-server` arguments that select this mode. RDB snapshots are always off.
    pub(super) fn args(self) -> [&'static str; 6] {
        let (appendonly, appendfsync) = match self {
            Self::None => ("no", "everysec"),
            Self::AofEverySec => ("yes", "everysec"),
            Self::AofAlways => ("yes", "always"),
        };
        [
            "--save",
            "",
            "--appendonly",
            appendonly,
            "--appendfsync",
            appendfsync,
        ]
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::AofEverySec => "aof-everysec",
            Self::AofAlways => "aof-always",
        })
    }
}

/// How to start a [`RedisMaster`](super::RedisMaster).
///
/// ```
/// use quorumlock_testkit::{MasterOptions, Persistence};
///
/// let opts = MasterOptions::new()
///     .persistence(Persistence::AofAlways)
///     .args(["--maxmemory", "64mb"]);
/// assert_eq!(opts.extra_args, ["--maxmemory", "64mb"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterOptions {
    /// What the server keeps on disk. Defaults to [`Persistence::None`].
    pub persistence: Persistence,
    /// Arguments appended to the command line, one argv item each (`"--save", ""`, not
    /// `"--save \"\""`). Later arguments override earlier ones, so these can override the kit's
    /// own. Defaults to none.
    pub extra_args: Vec<String>,
    /// The `redis-server` to run (a wrapper that starts it under a shim, say). Defaults to
    /// `$QUORUMLOCK_REDIS_SERVER`, else `redis-server` on `$PATH`, else `/usr/bin`'s; set here,
    /// it concerns these masters only, where the variable would concern every master the
    /// process starts meanwhile.
    pub binary: Option<PathBuf>,
}

impl MasterOptions {
    /// Options with no persistence and no extra arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets what the server keeps on disk. Defaults to [`Persistence::None`].
    #[must_use]
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Appends one command-line argument. Defaults to none.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Runs this `redis-server` binary (see the field of that name).
    #[must_use]
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Appends several command-line arguments. Defaults to none.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }
}

impl From<Persistence> for MasterOptions {
    fn from(persistence: Persistence) -> Self {
        Self::new().persistence(persistence)
    }
}
