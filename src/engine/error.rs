//! What the engine answers when it refuses: one error for the API to map to problem+json.

use crate::store;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("too many runs are waiting; try again later")]
    Overloaded,
    /// The store refuses writes (a full disk, a database that went away): a run accepted now
    /// could not be stored.
    #[error("the store refuses writes; try again later")]
    StoreDown,
    #[error("run not found")]
    NotFound,
    #[error("the run is already {0}")]
    AlreadyTerminal(&'static str),
    /// The request does not fit the run (e.g. a re-plan asked of a run that does not re-plan).
    #[error("{0}")]
    Conflict(String),
    /// The idempotency key made a run from another request: answering with that run would
    /// hand the caller a run it did not ask for.
    #[error("the Idempotency-Key was already used with a different request")]
    IdempotencyKeyReused,
    /// The run asked to be refused while its session has a run in progress, and it has.
    #[error("session `{0}` has a run in progress (the request's concurrency is `reject`)")]
    SessionBusy(String),
    /// The tenant is at one of its quotas (`[quotas]`).
    #[error("{}", .0.describe())]
    QuotaExceeded(crate::domain::quota::Exceeded),
    /// The fork would copy more of its parent's history than its tenant's forks may copy in a
    /// whole day (`fork_bytes_per_day`).
    #[error(
        "the fork would copy {bytes} bytes of history, more than the tenant's quota \
         `fork_bytes_per_day` ({limit}) lets its forks copy in a day; fork from an earlier \
         `checkpoint` (or `before_step`) to copy less"
    )]
    ForkTooLarge { bytes: u64, limit: u64 },
    /// The request is wrong for this run (422): each problem located by its pointer.
    #[error("the request is invalid for this run")]
    Invalid(Vec<crate::plan::Problem>),
    #[error(transparent)]
    Store(#[from] store::Error),
}
