//! What a handler gets: the job, its attempt and lease, and the cancellation token.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::progress::{check_fraction, clip_message, ProgressSink};
use crate::v1 as pb;
use crate::JobError;

/// The result of a job this one depends on, as the assignment carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct ParentResult {
    /// The parent's id.
    pub job_id: i64,
    /// The parent's job type.
    pub job_type: String,
    /// What the parent's handler returned; empty if nothing.
    pub result: Vec<u8>,
    /// `Succeeded`, or `Dead` or `Cancelled` for a job enqueued to run whatever its parents' outcome.
    pub state: pb::JobState,
}

impl ParentResult {
    pub(crate) fn from_wire(p: pb::ParentResult) -> Self {
        let state = p.state();
        ParentResult { job_id: p.job_id, job_type: p.r#type, result: p.result, state }
    }

    /// Decodes the parent's result as JSON; one that does not decode is a fatal failure.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_slice(&self.result).map_err(JobError::new)
    }
}

/// Why a job's handler was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// Someone called CancelJob; the job is CANCELLED.
    Requested,
    /// The attempt outlived its attempt timeout.
    Timeout,
    /// The broker no longer holds this worker's lease, or the lease ran out on this worker's
    /// clock without an extension (the broker is frozen or out of reach).
    LeaseLost,
    /// This worker is shutting down and its grace period ran out.
    Shutdown,
}

impl CancelReason {
    /// The reason's name as every Jobwire library spells it: `requested`, `timeout`,
    /// `lease_lost`, `shutdown`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Requested => "requested",
            CancelReason::Timeout => "timeout",
            CancelReason::LeaseLost => "lease_lost",
            CancelReason::Shutdown => "shutdown",
        }
    }
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cancellation of one attempt: a token and the reason it was cancelled for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cancellation {
    token: CancellationToken,
    reason: Arc<OnceLock<CancelReason>>,
}

impl Cancellation {
    /// Cancels with reason, unless already cancelled (the first reason stays).
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }
}

/// One attempt of a job, handed to its handler.
///
/// Cancellation is cooperative: select on [`Job::cancelled`] (or pass [`Job::cancellation_token`]
/// to what accepts one) and return. After a cancel the attempt's outcome is settled elsewhere
/// (the broker cancelled it, its lease is gone, or the shutdown reported it), so what the handler
/// returns then is dropped, except after an attempt timeout, which is reported as a timeout.
#[derive(Clone, Debug)]
pub struct Job {
    pub(crate) id: i64,
    pub(crate) job_type: String,
    pub(crate) queue: String,
    pub(crate) payload: Arc<[u8]>,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) lease_token: String,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) metadata: Arc<HashMap<String, String>>,
    pub(crate) parent_results: Arc<[ParentResult]>,
    pub(crate) cancel: Cancellation,
    pub(crate) progress: Arc<ProgressSink>,
}

impl Job {
    pub fn id(&self) -> i64 {
        self.id
    }
    pub fn job_type(&self) -> &str {
        &self.job_type
    }
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// The payload exactly as the producer enqueued it.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
    /// This attempt's number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    /// The lease's fencing token: opaque, compare it, never parse it.
    pub fn lease_token(&self) -> &str {
        &self.lease_token
    }
    /// How long this attempt may run; the worker cancels it with [`CancelReason::Timeout`] then.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }
    /// What the producer attached: its own keys and the W3C trace context of the enqueue under
    /// `traceparent` and `tracestate`.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// The results of the jobs this one depends on, in the order the producer named them; empty
    /// for a job without parents.
    pub fn parent_results(&self) -> &[ParentResult] {
        &self.parent_results
    }

    /// Reports how far the job got: a fraction from 0 to 1 (`None` when unknown) and/or a short
    /// message (cut to 256 bytes). Call it as often as you like: the worker sends at most one
    /// report per second, the last one always, and none after the job's result. A fraction
    /// outside 0..=1 is a fatal error, for `?`.
    pub fn progress(&self, fraction: Option<f64>, message: impl Into<String>) -> Result<(), JobError> {
        let fraction = check_fraction(fraction)?;
        self.progress.report(fraction, clip_message(message.into()));
        Ok(())
    }

    /// Decodes the payload as JSON. A payload that does not decode is a fatal failure (a
    /// `serde_json::Error`): retrying the same bytes cannot help.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_slice(&self.payload).map_err(JobError::new)
    }

    /// The token cancelled when the attempt is cancelled.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel.token
    }

    /// Waits until the attempt is cancelled and says why.
    pub async fn cancelled(&self) -> CancelReason {
        self.cancel.token.cancelled().await;
        self.cancel_reason().unwrap_or(CancelReason::Requested)
    }

    /// Why the attempt was cancelled, or `None` while it was not.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        if self.cancel.token.is_cancelled() {
            self.cancel.reason.get().copied()
        } else {
            None
        }
    }
}
