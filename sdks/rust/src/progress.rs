//! Results and progress: how a handler's value becomes a job's result, and how its progress
//! reports are thinned out before they reach the broker.
//!
//! A handler may report progress as often as it likes (every row of a million-row import); the
//! broker keeps only the newest report, so the worker sends at most one per job per interval (a
//! second), and the last one always: a report held back goes out when the interval is over
//! (unless a newer one replaced it first), or right before the job's result if that comes first.
//! Nothing goes after the result (docs/protocol.md).

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::v1 as pb;
use crate::worker::Event;
use crate::JobError;

/// The least time between two progress reports of one job.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The longest progress message the broker takes, in bytes of UTF-8 (`Progress.message`).
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 256;

/// What a handler returns on success: the job's result, sent to the broker with the success.
///
/// `()` is no result; `Vec<u8>`, `String` and `&'static str` are sent as their bytes; wrap a
/// value in [`Json`] to send it as JSON.
pub trait JobOutput {
    /// The result's bytes; empty for none.
    fn into_result(self) -> Result<Vec<u8>, JobError>;
}

impl JobOutput for () {
    fn into_result(self) -> Result<Vec<u8>, JobError> {
        Ok(Vec::new())
    }
}

impl JobOutput for Vec<u8> {
    fn into_result(self) -> Result<Vec<u8>, JobError> {
        Ok(self)
    }
}

impl JobOutput for String {
    fn into_result(self) -> Result<Vec<u8>, JobError> {
        Ok(self.into_bytes())
    }
}

impl JobOutput for &'static str {
    fn into_result(self) -> Result<Vec<u8>, JobError> {
        Ok(self.as_bytes().to_vec())
    }
}

/// A result sent as JSON: `Ok(Json(value))`. A value serde cannot serialize fails the attempt
/// as fatal (a `serde_json::Error`): the same value would fail again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: Serialize> JobOutput for Json<T> {
    fn into_result(self) -> Result<Vec<u8>, JobError> {
        serde_json::to_vec(&self.0).map_err(JobError::new)
    }
}

/// What [`Throttle::offer`] says to do with a report.
#[derive(Debug, PartialEq)]
pub(crate) struct Offer<R> {
    /// Send this at once.
    pub(crate) send: Option<R>,
    /// Call [`Throttle::due`] at this time for the report held back.
    pub(crate) due_at: Option<Instant>,
}

/// At most one report per interval, the last one always; nothing once closed. Time is passed in,
/// so that tests move it by hand (tokio's paused clock).
#[derive(Debug)]
pub(crate) struct Throttle<R> {
    interval: Duration,
    sent_at: Option<Instant>,
    pending: Option<R>,
    armed: bool,
    closed: bool,
}

impl<R> Throttle<R> {
    pub(crate) fn new(interval: Duration) -> Self {
        Throttle { interval, sent_at: None, pending: None, armed: false, closed: false }
    }

    /// Offers a report at now.
    pub(crate) fn offer(&mut self, now: Instant, report: R) -> Offer<R> {
        if self.closed {
            return Offer { send: None, due_at: None };
        }
        match self.sent_at {
            Some(at) if now < at + self.interval => {
                self.pending = Some(report);
                let due_at = (!self.armed).then_some(at + self.interval);
                self.armed = true;
                Offer { send: None, due_at }
            }
            _ => {
                self.sent_at = Some(now);
                self.pending = None;
                Offer { send: Some(report), due_at: None }
            }
        }
    }

    /// The held-back report to send now, if one is still waiting.
    pub(crate) fn due(&mut self, now: Instant) -> Option<R> {
        self.armed = false;
        let report = self.pending.take().filter(|_| !self.closed)?;
        self.sent_at = Some(now);
        Some(report)
    }

    /// Stops: the job's result goes next (or the job is gone). Returns the report held back, to
    /// send before the result; later offers are dropped.
    pub(crate) fn close(&mut self) -> Option<R> {
        let report = self.pending.take().filter(|_| !self.closed);
        self.closed = true;
        report
    }
}

/// Where a job's progress reports go: its throttle, and the worker's core for what is to be sent.
#[derive(Debug)]
pub(crate) struct ProgressSink {
    pub(crate) job_id: i64,
    pub(crate) seq: u64,
    pub(crate) lease_token: String,
    pub(crate) throttle: Mutex<Throttle<pb::Progress>>,
    pub(crate) events: mpsc::UnboundedSender<Event>,
}

impl ProgressSink {
    pub(crate) fn report(&self, fraction: Option<f64>, message: String) {
        let p = pb::Progress { job_id: self.job_id, lease_token: self.lease_token.clone(), fraction, message };
        let offer = self.throttle.lock().unwrap_or_else(|e| e.into_inner()).offer(Instant::now(), p);
        if offer.send.is_some() || offer.due_at.is_some() {
            let _ = self.events.send(Event::Progress { job_id: self.job_id, seq: self.seq, send: offer.send, due_at: offer.due_at });
        }
    }

    pub(crate) fn due(&self, now: Instant) -> Option<pb::Progress> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner()).due(now)
    }

    pub(crate) fn close(&self) -> Option<pb::Progress> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner()).close()
    }
}

/// fraction checked to lie in 0..=1; anything else is a fatal error naming it.
pub(crate) fn check_fraction(fraction: Option<f64>) -> Result<Option<f64>, JobError> {
    match fraction {
        Some(f) if !(0.0..=1.0).contains(&f) => Err(JobError::fatal(format!("progress fraction {f} is not between 0 and 1"))),
        f => Ok(f),
    }
}

/// message cut to [`MAX_PROGRESS_MESSAGE_BYTES`] at a character boundary: a progress line is for
/// people, and a long one is better shortened than refused.
pub(crate) fn clip_message(mut message: String) -> String {
    if message.len() > MAX_PROGRESS_MESSAGE_BYTES {
        let mut end = MAX_PROGRESS_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

/// The fatal failure of an attempt whose result the broker would not store: retrying produces the
/// same result.
pub(crate) fn result_too_large(job_id: i64, size: usize, limit: usize) -> pb::Failure {
    pb::Failure {
        kind: pb::FailureKind::Fatal as i32,
        error_type: "ResultTooLarge".into(),
        message: format!("the result of job {job_id} is {size} bytes, more than the broker's limit of {limit} bytes"),
        details: String::new(),
        retry_after: None,
        timed_out: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_report_goes_at_once_then_one_a_second_the_newest_held_back_always() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(t.offer(ms(0), "a"), Offer { send: Some("a"), due_at: None });
        assert_eq!(t.offer(ms(200), "b"), Offer { send: None, due_at: Some(ms(1000)) });
        assert_eq!(t.offer(ms(500), "c"), Offer { send: None, due_at: None });
        assert_eq!(t.due(ms(1000)), Some("c"));
        assert_eq!(t.due(ms(1000)), None);
        assert_eq!(t.offer(ms(2500), "d"), Offer { send: Some("d"), due_at: None });
    }

    #[tokio::test(start_paused = true)]
    async fn close_hands_over_the_report_held_back_then_nothing_is_sent() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        t.offer(t0, "a");
        assert!(t.offer(t0 + Duration::from_millis(500), "b").due_at.is_some());
        assert_eq!(t.close(), Some("b"), "the result goes next: b right before it");
        assert_eq!(t.due(t0 + Duration::from_secs(1)), None);
        assert_eq!(t.offer(t0 + Duration::from_secs(5), "c"), Offer { send: None, due_at: None });
        assert_eq!(t.close(), None);
    }

    #[test]
    fn a_fraction_outside_0_to_1_is_fatal_and_a_long_message_is_cut_at_a_character() {
        assert_eq!(check_fraction(None).ok(), Some(None));
        assert_eq!(check_fraction(Some(1.0)).ok(), Some(Some(1.0)));
        for bad in [-0.1, 1.5, f64::NAN] {
            let e = check_fraction(Some(bad)).err().expect("refused");
            assert!(e.message().contains("is not between 0 and 1"), "{}", e.message());
        }
        assert_eq!(clip_message("short".into()), "short");
        assert_eq!(clip_message("é".repeat(200)), "é".repeat(128));
        assert_eq!(clip_message(format!("a{}", "é".repeat(200))), format!("a{}", "é".repeat(127)));
    }

    #[test]
    fn outputs_become_bytes() {
        assert_eq!(().into_result().ok(), Some(vec![]));
        assert_eq!("text".into_result().ok(), Some(b"text".to_vec()));
        assert_eq!(Json(vec![1, 2]).into_result().ok(), Some(b"[1,2]".to_vec()));
    }
}
