//! [`SchedulerError`]: what building or running a scheduler can fail with.

use std::time::Duration;

/// An error from building a scheduler or from talking to the masters on its behalf.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A cron expression that does not parse.
    #[error("invalid cron expression {expr:?}: {reason}")]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// What the parser said.
        reason: String,
    },
    /// An interval out of range.
    #[error("invalid interval {0:?}: expected between 1 ms and 100 years")]
    InvalidPeriod(Duration),
    /// A job option out of range or in conflict with another.
    #[error("job {job:?}: {reason}")]
    InvalidJob {
        /// The job's name.
        job: String,
        /// What is wrong, and what was expected.
        reason: String,
    },
    /// Two jobs with the same name: their slots would be the same claims.
    #[error("job {0:?} is configured twice: expected unique job names")]
    DuplicateJob(String),
    /// `start` was called outside a tokio runtime.
    #[error("the scheduler must be started inside a tokio runtime")]
    NoRuntime,
    /// A [fleet](crate::SchedulerBuilder::fleet) that does not name this worker.
    #[error("worker {worker:?} is not in its fleet {fleet:?}: expected the fleet to name every worker, this one included")]
    NotInFleet {
        /// This worker's name.
        worker: String,
        /// The fleet as given.
        fleet: Vec<String>,
    },
    /// A job name that is not configured.
    #[error("no job named {0:?}")]
    UnknownJob(String),
    /// The masters could not answer a slot claim or a status query.
    #[error("slot {slot:?} of job {job:?}: {source}")]
    Claim {
        /// The job.
        job: String,
        /// The slot's id.
        slot: String,
        /// What failed.
        #[source]
        source: Box<quorumlock::LockError>,
    },
}
