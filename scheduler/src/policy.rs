//! The policies a job chooses: catch-up of missed slots, concurrency with its previous slot, and
//! what happens to a slot whose runner died.

/// What a worker does with slots that fell due while it was not waiting for them (before it
/// started, or while it was stalled), as long as they are within the job's
/// [starting deadline](crate::Job::starting_deadline). Slots past it are never run (counted as
/// missed). Like Quartz's misfire instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// Run no slot that fell due before the worker started; after a stall, run only the newest
    /// slot that fell due (the older ones count as missed).
    None,
    /// Like `None`, and at start-up also run the newest slot that fell due within the starting
    /// deadline (Kubernetes CronJob's behaviour). The default.
    #[default]
    Latest,
    /// Run every slot that fell due within the starting deadline, oldest first, at start-up and
    /// after a stall.
    All,
}

/// What a job's slot does while the job's previous slot still runs (anywhere in the fleet).
/// Like Kubernetes CronJob's `concurrencyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Concurrency {
    /// Slots run side by side. The default.
    #[default]
    Allow,
    /// The slot is skipped while an earlier slot of the job runs. Fleet-wide, through a job lock
    /// held for the whole run (one more quorum round per slot); a run whose job lock is lost
    /// (renewals failed past its validity) is cancelled, as when its claim is lost. A
    /// [fleet](crate::SchedulerBuilder::fleet)'s backup reads the slot before taking the lock
    /// and leaves it alone when the slot ran elsewhere, so only a run holds it. A claim holds
    /// it for a moment too, so a worker refused it beside a slot still free reads the slot
    /// again for a few of the masters' timeouts (at least 250 ms, never past the next slot's
    /// due instant): a claim shows up there, a run of an earlier slot does not, and the slot is
    /// then skipped, even if that run ends a moment later.
    Forbid,
    /// The earlier slot's run is cancelled when the next slot falls due (by the worker running
    /// it, which watches the schedule too) and recorded as completed, so it is not retried.
    Replace,
}

/// What happens to a slot whose claim expired because its runner died (or was cancelled at
/// shutdown) before it recorded completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnAbandoned {
    /// The slot stays unrun: at most once. The default.
    #[default]
    Skip,
    /// Another worker runs it again, with a higher fencing token, up to the job's
    /// [`max_attempts`](crate::Job::max_attempts): at least once (as long as a worker lives),
    /// and the job's side effects tell the attempts apart by the token.
    Retry,
}
