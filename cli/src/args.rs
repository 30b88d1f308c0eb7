//! The command line: global connection settings and the subcommands.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration;
use crate::exit;

/// A cluster-wide `flock` on a majority of independent Redis masters: run a command while
/// holding a lock (`exec`, `exec --once` for cron jobs) or while leader of an election
/// (`elect`); follow an election (`observe`); inspect (`status`) and clear (`clear`) what the
/// masters hold.
#[derive(Debug, Parser)]
#[command(
    name = "quorumlock",
    version,
    after_help = exit::exit_codes_help!(),
    after_long_help = concat!(
        exit::exit_codes_help!(),
        "\n\nExamples:\n",
        "  # a cron job on several hosts that must run once per slot (the slot names the\n",
        "  # minute it was due, so a host whose cron fires late sees it already ran):\n",
        "  export QUORUMLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379\n",
        "  quorumlock exec --resource nightly-report --once \"$(date +%Y%m%d%H%M)\" -- ./report.sh\n",
        "\n",
        "  # at most one run every 10 minutes, however fast each run is:\n",
        "  quorumlock exec --resource sync --no-wait --hold-at-least 10m -- ./sync.sh\n",
        "\n",
        "  # who holds it, per node; and a --once slot:\n",
        "  quorumlock status --resource nightly-report\n",
        "  quorumlock status --resource nightly-report --slot 202401010300\n",
        "\n",
        "  # run a daemon on one host at a time (the others wait as standbys; the identity\n",
        "  # defaults to the host name):\n",
        "  quorumlock elect --name scheduler -- ./scheduler\n",
        "\n",
        "  # follow who leads, one line per change:\n",
        "  quorumlock observe --name scheduler\n",
        "\n",
        "  # remove a lock whose holder is known to be gone (prints what it removed):\n",
        "  quorumlock clear --resource nightly-report --force\n",
        "\n",
        "  # once, on a brand-new deployment that uses --restart-protection:\n",
        "  quorumlock provision\n",
    )
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) conn: Connection,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the masters are and how to talk to them.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// The masters, comma-separated URLs: redis://host:port (rediss:// for TLS, trusting the
    /// system's roots or SSL_CERT_FILE), optionally with user:password@ before the host and /db
    /// after the port. Use at least 3 independent masters (no replication between them) for
    /// Redlock; 1 is a plain Redis lock; 2 tolerate no failure.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub(crate) nodes: Vec<String>,

    /// The prefix of every key quorumlock writes.
    #[arg(long, global = true, default_value = quorumlock::defaults::KEY_PREFIX)]
    pub(crate) key_prefix: String,

    /// How long one request to one master may take before it counts as failed; beyond about
    /// 30 years, none.
    #[arg(long, global = true, default_value = "50ms", value_parser = duration::positive)]
    pub(crate) node_timeout: Duration,

    /// Keep masters that restarted or lost their data less than this ago out of quorums
    /// (whatever their persistence: empty, older data, a restored backup); no lock may be held
    /// longer than this without being renewed. Run `quorumlock provision` once on a brand-new
    /// deployment.
    #[arg(long, global = true, value_name = "MAX_TTL", value_parser = duration::ttl)]
    pub(crate) restart_protection: Option<Duration>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding the lock; it is renewed while the command runs.
    ///
    /// The command gets QUORUMLOCK_RESOURCE and QUORUMLOCK_FENCE (the fencing token of this
    /// grant: pass it to whatever the command writes, which should reject tokens lower than the
    /// highest it has seen). It runs in its own process group (so it cannot read from an
    /// interactive terminal); SIGINT, SIGTERM and SIGHUP sent to quorumlock are forwarded to
    /// that group. If the lock is lost, the group gets SIGTERM, then
    /// SIGKILL after --kill-after, and quorumlock exits 76. The lock is released on the way out.
    ///
    /// With --once SLOT, the command runs only if slot SLOT of the resource (the job) has not
    /// run anywhere: a completed slot is recorded on the masters (for --retention), and a later
    /// exec of the same slot exits 79 without running the command. A command that exits
    /// non-zero (or is killed) records the slot as abandoned, and a later exec exits 80 unless
    /// given --retry-abandoned. The command also gets QUORUMLOCK_SLOT and QUORUMLOCK_ATTEMPT.
    #[command(after_help = exit::exit_codes_help!())]
    Exec(ExecArgs),

    /// Show, per node, whether the lock key exists, its TTL, the node's epoch marker and its
    /// round-trip time.
    ///
    /// The holder is shown by the identity stored in its lock value when it has one (`quorumlock
    /// elect`); a plain lock's value says nothing about its owner, which is then reported as
    /// unknown. The state is "unknown" (exit 69) when the nodes that did not answer could make a
    /// quorum with those that hold the key. With --slot SLOT, shows that slot of the job
    /// (exec --once) instead.
    #[command(after_help = exit::exit_codes_help!())]
    Status(StatusArgs),

    /// Campaign for leadership of an election; run the command while leader.
    ///
    /// Waits until elected (woken when the leader resigns, or its lock expires), then runs
    /// the command with QUORUMLOCK_ELECTION, QUORUMLOCK_IDENTITY and QUORUMLOCK_FENCE (the
    /// leadership's fencing token). Leadership is renewed while the command runs; if it is lost,
    /// the command's process group gets SIGTERM, then SIGKILL after --kill-after, and quorumlock
    /// exits 76. When the command exits, quorumlock resigns at once (the next campaigner takes
    /// over) and exits with the command's code. `quorumlock status --resource NAME` shows the
    /// leader's identity.
    #[command(after_help = exit::exit_codes_help!())]
    Elect(ElectArgs),

    /// Mark every node as usable under --restart-protection (writes an old epoch marker and
    /// vouches for the node's current redis-server process).
    ///
    /// Only for brand-new masters, or masters idle for longer than the maximum TTL: provisioning
    /// a master that lost live locks gives up the protection for it. Needs --restart-protection
    /// MAX_TTL: a node whose process started less than MAX_TTL (plus drift) ago may have
    /// restarted and forgotten live locks, so it is refused, by name, unless --force is given
    /// (for a brand-new deployment, whose nodes all started recently). Nothing is written
    /// when a node is refused.
    #[command(after_help = exit::exit_codes_help!())]
    Provision(ProvisionArgs),

    /// Follow who leads an election: one line on stdout per change ("leader \"host-a\"
    /// (fencing token 7)", "no leader"), the first for the state when it starts.
    ///
    /// Runs until interrupted, or until --changes lines were printed. While fewer than a
    /// quorum of masters answer, nothing is printed (nobody can tell who leads).
    #[command(after_help = exit::exit_codes_help!())]
    Observe(ObserveArgs),

    /// Remove a lock, or a --once slot's claim and record, left behind by a holder known to
    /// be gone; prints what each master removed.
    ///
    /// Without --force, says what it would remove and exits 77: removing a lock whose holder
    /// still runs lets a second holder in beside it. Fence counters are kept, so tokens keep
    /// growing. A cleared slot runs again as a first attempt at its next exec --once.
    #[command(after_help = exit::exit_codes_help!())]
    Clear(ClearArgs),
}

/// `quorumlock observe`.
#[derive(Debug, Args)]
pub(crate) struct ObserveArgs {
    /// The election's name.
    #[arg(long, short)]
    pub(crate) name: String,

    /// Exit (0) after printing this many lines.
    #[arg(long, value_name = "N")]
    pub(crate) changes: Option<u64>,
}

/// `quorumlock clear`.
#[derive(Debug, Args)]
pub(crate) struct ClearArgs {
    /// The lock's name (with --slot: the job's).
    #[arg(long, short)]
    pub(crate) resource: String,

    /// Clear slot SLOT of the job (as given to exec --once) instead of the lock.
    #[arg(long, value_name = "SLOT")]
    pub(crate) slot: Option<String>,

    /// Remove it, whoever holds it.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `quorumlock provision`.
#[derive(Debug, Args)]
pub(crate) struct ProvisionArgs {
    /// Provision nodes that started less than one max TTL ago too: only when you know they are
    /// brand new, or granted no lock in the last max TTL.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `quorumlock exec`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The name of the lock.
    #[arg(long, short)]
    pub(crate) resource: String,

    /// The lock's time to live on the masters; it is renewed every third of it while the
    /// command runs. A crashed quorumlock frees the lock after at most this long.
    #[arg(long, default_value = "30s", value_parser = duration::ttl)]
    pub(crate) ttl: Duration,

    /// Wait at most this long for the lock (beyond about 30 years, as long as it takes).
    /// Without --wait or --no-wait, wait as long as it takes (like flock).
    #[arg(long, value_parser = duration::positive, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,

    /// Do not wait for a holder: fail (exit 75) after a few quick retries, within about a
    /// second (the retries break ties between hosts that start at the same moment).
    #[arg(long)]
    pub(crate) no_wait: bool,

    /// While waiting, give up (exit 69) once fewer than a quorum of masters answered for this
    /// long. A wait prints a line on stderr now and then: who holds the lock, on how many
    /// masters, for how long it has waited.
    #[arg(long, default_value = "10s", value_parser = duration::positive)]
    pub(crate) max_unavailable: Duration,

    /// Run the command only if slot SLOT (e.g. "$(date +%Y%m%d%H%M)", the time the job was
    /// due) of the resource has not run anywhere, and record its completion; never waits.
    /// Exit 79 without running the command if the slot completed or runs elsewhere, 80 if a
    /// runner claimed it and failed or died. What a cron job on several hosts wants: a plain
    /// --no-wait lock is free again once the first run ends, so a host whose cron fires a
    /// second late would run the job again.
    #[arg(long, value_name = "SLOT", conflicts_with = "wait")]
    pub(crate) once: Option<String>,

    /// Hold one of K permits of the counting semaphore RESOURCE instead of the lock: at most K
    /// commands run at once across the hosts. Every host must give the same K.
    #[arg(long, value_name = "K", conflicts_with_all = ["once", "shared", "exclusive"])]
    pub(crate) permits: Option<usize>,

    /// Hold a read permit of the read-write lock RESOURCE: runs beside other --shared commands,
    /// never beside an --exclusive one. A waiting --exclusive command goes first.
    #[arg(long, group = "rw_mode", conflicts_with_all = ["once", "exclusive"])]
    pub(crate) shared: bool,

    /// Hold the read-write lock RESOURCE alone: no --shared or other --exclusive command runs
    /// beside it (a plain exec on RESOURCE is a different lock). Not with --hold-at-least: a
    /// writer holds every read permit as one set, whose lease has no minimum hold.
    #[arg(long, group = "rw_mode", conflicts_with_all = ["once", "hold_at_least"])]
    pub(crate) exclusive: bool,

    /// With --shared or --exclusive (required): how many --shared commands may run at once
    /// (every host must give the same number). Defaults to 16.
    #[arg(long, value_name = "N", requires = "rw_mode")]
    pub(crate) readers: Option<usize>,

    /// With --once: run a slot whose last run failed (non-zero exit) or whose runner died,
    /// instead of exiting 80 (at-least-once; QUORUMLOCK_FENCE then tells the runs apart).
    #[arg(long, requires = "once")]
    pub(crate) retry_abandoned: bool,

    /// With --once: how long the slot's record (completed, abandoned) is kept on the masters.
    #[arg(long, default_value = "24h", value_parser = duration::positive)]
    pub(crate) retention: Duration,

    /// Keep the lock after the command ends until this long after it was granted, so that no
    /// other host can take it sooner (ShedLock's lockAtLeastFor). At most the max TTL.
    #[arg(long, value_name = "DURATION", value_parser = duration::positive)]
    pub(crate) hold_at_least: Option<Duration>,

    /// Stop renewing after this long; the command is then terminated as if the lock was lost.
    #[arg(long, value_parser = duration::positive)]
    pub(crate) max_hold: Option<Duration>,

    /// After SIGTERM on a lost lock, wait this long before SIGKILL (beyond about 30 years,
    /// never).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub(crate) kill_after: Duration,

    /// The command and its arguments, after `--` (required, so that a mistyped flag is an
    /// error rather than a command).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `quorumlock status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The name of the lock (with --slot: the job's).
    #[arg(long, short)]
    pub(crate) resource: String,

    /// Show slot SLOT of the job (as given to exec --once): free, running, completed or
    /// abandoned, with its runner and attempts, as a quorum of masters reports it.
    #[arg(long, value_name = "SLOT")]
    pub(crate) slot: Option<String>,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `quorumlock elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name (the lock's resource name).
    #[arg(long, short)]
    pub(crate) name: String,

    /// Who this campaigner is, shown to observers and by `status` (1 to 256 bytes, no control
    /// characters). Defaults to the host name.
    #[arg(long)]
    pub(crate) identity: Option<String>,

    /// The leadership lock's time to live; renewed every third of it. A crashed leader is
    /// replaced after at most this long.
    #[arg(long, default_value = "30s", value_parser = duration::ttl)]
    pub(crate) ttl: Duration,

    /// While campaigning, give up (exit 69) once fewer than a quorum of masters answered for
    /// this long. A campaign prints a line on stderr now and then: who leads, on how many
    /// masters, for how long it has waited.
    #[arg(long, default_value = "10s", value_parser = duration::positive)]
    pub(crate) max_unavailable: Duration,

    /// Give up campaigning after this long (exit 75, naming the leader). Without it, wait
    /// until elected.
    #[arg(long, value_parser = duration::positive)]
    pub(crate) wait: Option<Duration>,

    /// Stop renewing after this long; the command is then terminated as if leadership was lost.
    #[arg(long, value_parser = duration::positive)]
    pub(crate) max_hold: Option<Duration>,

    /// After SIGTERM on a lost leadership, wait this long before SIGKILL (beyond about 30
    /// years, never).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub(crate) kill_after: Duration,

    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}
