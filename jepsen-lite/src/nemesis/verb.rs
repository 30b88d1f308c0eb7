//! The nemesis verbs of the history (`f` of a nemesis event): one typed list, read by the
//! runner that writes them, the verdict that finds the fault windows and the report that draws
//! them, so that no verb is spelled twice.

/// One nemesis verb, as written in the history's `f` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Links cut through the proxy or by iptables (both ways or one way).
    Partition,
    /// Every fault of a random step lifted.
    PartitionEnd,
    /// A master stopped (`SIGSTOP`).
    Pause,
    /// A master continued (`SIGCONT`).
    Resume,
    /// A client process stopped.
    PauseClient,
    /// A client process continued.
    ResumeClient,
    /// Requests on a link delayed.
    Delay,
    /// A share of packets dropped below TCP.
    Loss,
    /// Replies on links held back.
    Hold,
    /// Held replies let go.
    Release,
    /// A master killed (`SIGKILL`).
    Kill,
    /// A killed master started again.
    Restart,
    /// A client process killed while it may hold a lock.
    CrashClient,
    /// A master's wall clock jumped.
    ClockBump,
    /// Masters' wall clocks running fast.
    ClockRate,
    /// A master's wall clock jumping back and forth.
    ClockStrobe,
    /// An RDB snapshot taken (`SAVE`).
    SaveSnapshot,
    /// An AOF's tail cut off (power loss).
    TruncateAof,
    /// A master's persistence files copied aside, to be restored later.
    Backup,
    /// Lock keys deleted by hand.
    ExpireKeys,
    /// Every fault lifted; the clients are owed liveness from here.
    Heal,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Self; 21] = [
        Self::Partition,
        Self::PartitionEnd,
        Self::Pause,
        Self::Resume,
        Self::PauseClient,
        Self::ResumeClient,
        Self::Delay,
        Self::Loss,
        Self::Hold,
        Self::Release,
        Self::Kill,
        Self::Restart,
        Self::CrashClient,
        Self::ClockBump,
        Self::ClockRate,
        Self::ClockStrobe,
        Self::SaveSnapshot,
        Self::TruncateAof,
        Self::Backup,
        Self::ExpireKeys,
        Self::Heal,
    ];

    /// The history's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Partition => "partition",
            Self::PartitionEnd => "partition-end",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::PauseClient => "pause-client",
            Self::ResumeClient => "resume-client",
            Self::Delay => "delay",
            Self::Loss => "loss",
            Self::Hold => "hold",
            Self::Release => "release",
            Self::Kill => "kill",
            Self::Restart => "restart",
            Self::CrashClient => "crash-client",
            Self::ClockBump => "clock-bump",
            Self::ClockRate => "clock-rate",
            Self::ClockStrobe => "clock-strobe",
            Self::SaveSnapshot => "save-snapshot",
            Self::TruncateAof => "truncate-aof",
            Self::Backup => "backup",
            Self::ExpireKeys => "expire-keys",
            Self::Heal => "heal",
        }
    }

    /// The verb spelled `f`, if it is one.
    pub fn parse(f: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == f)
    }

    /// Whether it puts a fault on that a random step lifts at its end (the window in which a
    /// grant counts as "under fault").
    pub const fn starts_fault(self) -> bool {
        matches!(
            self,
            Self::Partition
                | Self::Pause
                | Self::PauseClient
                | Self::Delay
                | Self::Loss
                | Self::Hold
                | Self::Kill
                | Self::ClockBump
                | Self::ClockRate
                | Self::ClockStrobe
        )
    }

    /// Whether it lifts every fault on (the end of a random step, or the heal).
    pub const fn ends_all(self) -> bool {
        matches!(self, Self::PartitionEnd | Self::Heal)
    }

    /// Whether it ends the band the timeline draws from an earlier fault.
    pub const fn ends_band(self) -> bool {
        matches!(
            self,
            Self::Heal | Self::PartitionEnd | Self::Resume | Self::ResumeClient | Self::Release
        )
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_reads_back() {
        for verb in Verb::ALL {
            assert_eq!(Verb::parse(verb.as_str()), Some(verb));
        }
        assert_eq!(Verb::parse("acquire"), None);
    }

    #[test]
    fn ends_are_not_starts() {
        for verb in Verb::ALL {
            assert!(!(verb.starts_fault() && (verb.ends_all() || verb.ends_band())));
        }
    }
}
