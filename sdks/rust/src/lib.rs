//! A worker library for the Jobwire job broker.
//!
//! Register an async handler per job type; the [`Worker`] keeps one gRPC stream to the broker,
//! runs up to `capacity` jobs at once, heartbeats their leases, re-sends results until the
//! broker answers them, reconnects with backoff, gives up a job whose lease ran out on its own
//! clock, and shuts down gracefully. The wire protocol is docs/protocol.md of the repository.
//!
//! ```no_run
//! use jobwire::{Job, JobError, Worker};
//!
//! #[derive(serde::Deserialize)]
//! struct Email { to: String }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), jobwire::Error> {
//!     Worker::from_env()
//!         .capacity(16)
//!         .handle_json("email.send", |job: Job, email: Email| async move {
//!             if email.to.is_empty() {
//!                 return Err(JobError::fatal("no recipient")); // straight to the dead-letter queue
//!             }
//!             println!("sent an email to {} (job {})", email.to, job.id());
//!             Ok(())
//!         })
//!         .build()?
//!         .run_until_signal()
//!         .await
//! }
//! ```
//!
//! # Failures
//!
//! A handler returns `Result<(), E>` with any `E: Into<JobError>`; every
//! `std::error::Error + Send + Sync + 'static` converts, so `?` works. FATAL (the job goes to the
//! dead-letter queue at once) are a handler panic, and by default the errors of a payload that
//! does not decode: `serde_json::Error`, `std::str::Utf8Error`, `std::string::FromUtf8Error`,
//! `std::num::ParseIntError`, `std::num::ParseFloatError`, and an `std::io::Error` of kind
//! `InvalidData` or `Unsupported`. Everything else is TRANSIENT (retried with the broker's
//! backoff). [`JobError::fatal`] and [`JobError::transient`] say it explicitly, and
//! [`JobError::retry_after`] asks for a specific wait. The broker records the Rust type name
//! (`std::any::type_name`, e.g. `std::io::error::Error`; `panic` for a panic).
//!
//! # Cancellation
//!
//! [`Job::cancelled`] (or [`Job::cancellation_token`]) tells the handler to stop, with a
//! [`CancelReason`]: the broker cancelled the job (`Requested`), the attempt outlived its timeout
//! (`Timeout`, reported as a timeout), the lease was lost or ran out on this worker's clock
//! (`LeaseLost`), or the shutdown grace period ran out (`Shutdown`).

mod backoff;
mod connect;
mod error;
mod job;
mod lease;
mod progress;
mod settings;
mod worker;

/// The generated `jobwire.v1` messages and the worker service client.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("jobwire.v1");
}

pub use backoff::Backoff;
pub use connect::{ConnectError, ConnectErrorKind};
pub use error::{JobError, Kind};
pub use job::{CancelReason, Job, ParentResult};
pub use progress::{JobOutput, Json, MAX_PROGRESS_MESSAGE_BYTES, PROGRESS_INTERVAL};
pub use settings::{Settings, Tls, DEFAULT_ADDRESS};
pub use tokio_util::sync::CancellationToken;
pub use worker::{Worker, WorkerBuilder, SHUTDOWN_ERROR_TYPE};

/// Why a worker could not be built or stopped running.
#[derive(Debug)]
pub enum Error {
    /// A setting cannot be used; the message names it.
    Config(String),
    /// The broker refused the worker for a reason no reconnect can fix (INVALID_ARGUMENT,
    /// UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED).
    Rejected(tonic::Status),
    /// The token was refused or the TLS settings do not match the broker's.
    Connect(ConnectError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(m) => write!(f, "jobwire: {m}"),
            Error::Rejected(s) => write!(f, "jobwire: the broker rejected the worker: {:?}: {}", s.code(), s.message()),
            Error::Connect(e) => write!(f, "jobwire: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(_) => None,
            Error::Rejected(s) => Some(s),
            Error::Connect(e) => Some(e),
        }
    }
}
