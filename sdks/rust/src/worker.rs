//! The worker: one bidirectional stream to the broker, handlers run per job type.
//!
//! One task (the core) owns every piece of protocol state and is the stream's only writer; the
//! stream's reader, the handlers and the timers report to it through one channel, so nothing is
//! shared and nothing needs a lock. Handlers run as tokio tasks of their own.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;
use tonic::Code;

use crate::job::{Cancellation, ParentResult};
use crate::progress::{result_too_large, JobOutput, ProgressSink, Throttle, PROGRESS_INTERVAL};
use crate::settings::{Settings, Tls};
use crate::v1 as pb;
use crate::v1::worker_service_client::WorkerServiceClient;
use crate::{connect, lease, Backoff, CancelReason, Error, Job, JobError, Kind};

/// A handler's outcome: the result's bytes (empty for none), or its failure.
type HandlerFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, JobError>> + Send>>;
type Handler = Arc<dyn Fn(Job) -> HandlerFuture + Send + Sync>;

/// Stream errors that no reconnect can fix: the worker's configuration is wrong.
const PERMANENT_CODES: [Code; 4] = [Code::InvalidArgument, Code::Unauthenticated, Code::PermissionDenied, Code::Unimplemented];

/// The most bytes of one message read from the broker: a job with the largest payload (64 MiB)
/// and parents' results a broker may be set to take. gRPC reads 4 MiB unless told otherwise,
/// which an assignment passes on a broker whose operator raised max_payload_bytes or
/// max_result_bytes; the broker never sends more than it reads itself (docs/protocol.md).
const MAX_RECEIVE_BYTES: usize = 96 << 20;

/// The error type of an attempt cut off by the shutdown grace, as in every Jobwire library.
pub const SHUTDOWN_ERROR_TYPE: &str = "WorkerShutdown";

/// Everything a worker is configured with.
#[derive(Clone, Debug)]
struct Config {
    settings: Settings,
    worker_id: String,
    capacity: u32,
    queues: Vec<String>,
    movable: bool,
    grace_period: Duration,
    finish_timeout: Duration,
    connect_timeout: Duration,
    resend_delay: Duration,
    backoff: Backoff,
}

/// Builds a [`Worker`]: connection settings, options and a handler per job type.
pub struct WorkerBuilder {
    cfg: Config,
    handlers: BTreeMap<String, Handler>,
    error: Option<Error>,
}

impl WorkerBuilder {
    /// The broker's address, host:port (default 127.0.0.1:7070).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.cfg.settings.address = address.into();
        self
    }
    /// An API token for a broker with auth on, sent as `authorization: Bearer <token>`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.cfg.settings.token = Some(token.into());
        self
    }
    /// Connect over TLS (see [`Tls`]; `Tls::default()` trusts the system's CAs).
    pub fn tls(mut self, tls: Tls) -> Self {
        self.cfg.settings.tls = Some(tls);
        self
    }
    /// All connection settings at once, e.g. [`Settings::from_env`].
    pub fn settings(mut self, settings: Settings) -> Self {
        self.cfg.settings = settings;
        self
    }
    /// A stable id for the attempt history (default host-pid), 1..255 characters.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.cfg.worker_id = id.into();
        self
    }
    /// How many jobs run at once, 1..10000 (default 8).
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.cfg.capacity = capacity;
        self
    }
    /// The queues to take from; empty (the default) means every queue.
    pub fn queues<I: IntoIterator<Item = S>, S: Into<String>>(mut self, queues: I) -> Self {
        self.cfg.queues = queues.into_iter().map(Into::into).collect();
        self
    }
    /// The address reaches several brokers of one database (a load balancer, a DNS name of
    /// several): brokers may then end this worker's stream to even out their workers.
    pub fn movable(mut self, movable: bool) -> Self {
        self.cfg.movable = movable;
        self
    }
    /// After a shutdown starts, how long running jobs may take before they are cancelled and
    /// reported as transient `WorkerShutdown` failures (default 30 s).
    pub fn grace_period(mut self, d: Duration) -> Self {
        self.cfg.grace_period = d;
        self
    }
    /// After the grace period, how long to wait for the broker to answer the last results
    /// (default 10 s).
    pub fn finish_timeout(mut self, d: Duration) -> Self {
        self.cfg.finish_timeout = d;
        self
    }
    /// How long to wait for the broker's Welcome on a new stream (default 10 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.cfg.connect_timeout = d;
        self
    }
    /// Base wait before re-sending a message the broker refused as UNAVAILABLE (default 500 ms,
    /// plus up to as much again of jitter).
    pub fn resend_delay(mut self, d: Duration) -> Self {
        self.cfg.resend_delay = d;
        self
    }
    /// The reconnect backoff (default: full jitter, base 200 ms, cap 30 s).
    pub fn backoff(mut self, b: Backoff) -> Self {
        self.cfg.backoff = b;
        self
    }

    /// Registers the handler of a job type: an async function of the [`Job`] that returns
    /// `Ok(())` on success, or `Ok(result)` with the job's result (any [`JobOutput`]: bytes, a
    /// string, or [`Json`](crate::Json) of a value), or an error (anything that converts into
    /// [`JobError`]).
    pub fn handle<F, Fut, R, E>(mut self, job_type: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: JobOutput + 'static,
        E: Into<JobError> + 'static,
    {
        let job_type = job_type.into();
        if job_type.is_empty() {
            self.error.get_or_insert(Error::Config("a job type must not be empty".into()));
        } else if self.handlers.contains_key(&job_type) {
            self.error.get_or_insert(Error::Config(format!("a handler for {job_type} is already registered")));
        }
        let h: Handler = Arc::new(move |job| {
            let fut = handler(job);
            Box::pin(async move { fut.await.map_err(Into::into)?.into_result() })
        });
        self.handlers.insert(job_type, h);
        self
    }

    /// Registers a handler that takes the payload decoded from JSON as `T` beside the job. A
    /// payload that does not decode fails the attempt as fatal, without calling the handler.
    pub fn handle_json<T, F, Fut, R, E>(self, job_type: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Job, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: JobOutput + Send + 'static,
        E: Into<JobError> + 'static,
    {
        let handler = Arc::new(handler);
        self.handle(job_type, move |job: Job| {
            let handler = handler.clone();
            async move {
                let payload: T = job.json()?;
                handler(job, payload).await.map_err(Into::into)?.into_result()
            }
        })
    }

    /// Checks the configuration and reads the TLS files. An error names what to fix.
    pub fn build(self) -> Result<Worker, Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let cfg = self.cfg;
        if self.handlers.is_empty() {
            return Err(Error::Config("register at least one handler before building the worker".into()));
        }
        if cfg.worker_id.is_empty() || cfg.worker_id.chars().count() > 255 {
            return Err(Error::Config("the worker id must be 1..255 characters".into()));
        }
        if !(1..=10_000).contains(&cfg.capacity) {
            return Err(Error::Config(format!("capacity must be in 1..10000, not {}", cfg.capacity)));
        }
        let endpoint = cfg.settings.endpoint()?;
        let token = match &cfg.settings.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| Error::Config("the token holds characters a gRPC header cannot carry".into()))?,
            ),
            None => None,
        };
        Ok(Worker { cfg: Arc::new(cfg), handlers: Arc::new(self.handlers), endpoint, token, shutdown: CancellationToken::new() })
    }
}

/// Runs handlers for jobs pushed by a Jobwire broker.
///
/// ```no_run
/// # async fn example() -> Result<(), jobwire::Error> {
/// let worker = jobwire::Worker::builder()
///     .address("127.0.0.1:7070")
///     .handle("email.send", |job: jobwire::Job| async move {
///         println!("job {}", job.id());
///         Ok::<_, jobwire::JobError>(())
///     })
///     .build()?;
/// worker.run_until_signal().await // SIGTERM or Ctrl-C: a graceful drain
/// # }
/// ```
pub struct Worker {
    cfg: Arc<Config>,
    handlers: Arc<BTreeMap<String, Handler>>,
    endpoint: tonic::transport::Endpoint,
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    shutdown: CancellationToken,
}

impl Worker {
    /// A builder with the defaults: 127.0.0.1:7070, plaintext, capacity 8.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder {
            cfg: Config {
                settings: Settings::default(),
                worker_id: default_worker_id(),
                capacity: 8,
                queues: Vec::new(),
                movable: false,
                grace_period: Duration::from_secs(30),
                finish_timeout: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(10),
                resend_delay: Duration::from_millis(500),
                backoff: Backoff::default(),
            },
            handlers: BTreeMap::new(),
            error: None,
        }
    }

    /// A builder whose connection settings come from `JOBWIRE_ADDR`, `JOBWIRE_TOKEN`,
    /// `JOBWIRE_TLS`, `JOBWIRE_TLS_CA`, `JOBWIRE_TLS_CERT`, `JOBWIRE_TLS_KEY` and
    /// `JOBWIRE_TLS_SERVER_NAME` (docs/security.md), and its worker id from `JOBWIRE_WORKER_ID`
    /// when set.
    pub fn from_env() -> WorkerBuilder {
        let b = Worker::builder().settings(Settings::from_env());
        match std::env::var("JOBWIRE_WORKER_ID") {
            Ok(id) if !id.is_empty() => b.worker_id(id),
            _ => b,
        }
    }

    /// The token that starts a graceful shutdown when cancelled: Drain, let running jobs finish
    /// within the grace period, report the rest as transient `WorkerShutdown` failures, wait for
    /// the broker's answers, then close the stream; [`Worker::run`] returns then.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs until a SIGTERM or SIGINT (Ctrl-C) has been drained as [`Worker::shutdown_token`]
    /// describes.
    pub async fn run_until_signal(self) -> Result<(), Error> {
        let token = self.shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Error::Config(format!("cannot listen for SIGTERM: {e}")))?;
        let watch = tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                _ = token.cancelled() => {}
            }
            token.cancel();
        });
        let res = self.run().await;
        watch.abort();
        res
    }

    /// Connects, takes work and reconnects on errors, until a graceful shutdown completes.
    ///
    /// Returns an error when the broker rejects the worker for a reason no reconnect can fix
    /// ([`Error::Rejected`]: INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED)
    /// and a [`Error::Connect`] naming the setting to change when the token is refused or the TLS
    /// settings do not match the broker's. A broker that is down or restarting is waited for.
    pub async fn run(self) -> Result<(), Error> {
        let client = WorkerServiceClient::new(self.endpoint.connect_lazy())
            .max_decoding_message_size(MAX_RECEIVE_BYTES);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let mut core = Core::new(self.cfg.clone(), self.handlers.clone(), events_tx);
        let res = core.run(client, self.token.clone(), events_rx, self.shutdown.clone()).await;
        core.stop_all();
        res
    }
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "worker".into());
    format!("{host}-{}", std::process::id())
}

/// What reaches the core.
pub(crate) enum Event {
    /// A message of stream `sid`.
    Msg(u64, pb::ConnectResponse),
    /// Stream `sid` ended: status OK, or its error.
    Ended(u64, Result<(), tonic::Status>),
    /// A handler returned: its result's bytes, or its failure.
    Done { job_id: i64, seq: u64, outcome: Result<Vec<u8>, JobError> },
    /// A handler's progress report passed its throttle: to send now, and/or a flush to schedule.
    Progress { job_id: i64, seq: u64, send: Option<pb::Progress>, due_at: Option<Instant> },
}

/// Timers of held jobs; each is checked against the job's current state when it fires.
#[derive(Debug)]
enum Timer {
    /// The lease may have run out on this worker's clock.
    Lease { job_id: i64, seq: u64 },
    AttemptTimeout { job_id: i64, seq: u64 },
    ResendResult { job_id: i64, seq: u64 },
    ResendStarted { job_id: i64, seq: u64 },
    ResendRelease { job_id: i64, token: String },
    /// A progress report held back by the throttle may be sent.
    Progress { job_id: i64, seq: u64 },
}

/// A job the worker holds: it counts against capacity until acknowledged, refused or cancelled.
struct Held {
    /// Tells this hand-out of the job from a later one of the same job id.
    seq: u64,
    cancel: Cancellation,
    lease: pb::LeaseRef,
    attempt_timeout: Option<Duration>,
    /// Set once the handler returned (or the shutdown reported it): kept until answered.
    result: Option<pb::Result>,
    /// When the lease runs out on this worker's clock; `None` leaves it to the broker.
    lease_end: Option<Instant>,
    /// When the oldest heartbeat that named the lease on this stream and has no answer was sent.
    heartbeat_at: Option<Instant>,
    timed_out: bool,
    progress: Arc<ProgressSink>,
}

struct Session {
    id: u64,
    /// The stream's sending side; `None` once half-closed.
    out: Option<mpsc::UnboundedSender<pb::ConnectRequest>>,
    task: JoinHandle<()>,
    welcomed: bool,
    drain_requested: bool,
}

pub(crate) struct Core {
    cfg: Arc<Config>,
    handlers: Arc<BTreeMap<String, Handler>>,
    events: mpsc::UnboundedSender<Event>,
    jobs: HashMap<i64, Held>,
    releases: HashMap<i64, pb::Release>,
    session: Option<Session>,
    next_sid: u64,
    next_seq: u64,
    shutting_down: bool,
    hard_stopped: bool,
    /// The Welcome's lease duration less the margin; `None`: leases are left to the broker.
    lease_allowance: Option<Duration>,
    heartbeat_every: Duration,
    timers: DelayQueue<Timer>,
    backoff: Backoff,
    next_heartbeat: Option<Instant>,
    grace_at: Option<Instant>,
    hard_at: Option<Instant>,
    reconnect_at: Option<Instant>,
    connect_deadline: Option<Instant>,
    close_deadline: Option<Instant>,
    /// The largest result the broker stores (Welcome.max_result_bytes); 0: it did not say.
    max_result_bytes: usize,
    /// The least time between two progress reports of a job.
    progress_interval: Duration,
}

impl Core {
    fn new(cfg: Arc<Config>, handlers: Arc<BTreeMap<String, Handler>>, events: mpsc::UnboundedSender<Event>) -> Self {
        let backoff = cfg.backoff.clone();
        Core {
            cfg,
            handlers,
            events,
            jobs: HashMap::new(),
            releases: HashMap::new(),
            session: None,
            next_sid: 0,
            next_seq: 0,
            shutting_down: false,
            hard_stopped: false,
            lease_allowance: None,
            heartbeat_every: Duration::from_secs(10),
            timers: DelayQueue::new(),
            backoff,
            next_heartbeat: None,
            grace_at: None,
            hard_at: None,
            reconnect_at: None,
            connect_deadline: None,
            close_deadline: None,
            max_result_bytes: 0,
            progress_interval: PROGRESS_INTERVAL,
        }
    }

    async fn run(
        &mut self,
        client: WorkerServiceClient<tonic::transport::Channel>,
        token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
        mut events: mpsc::UnboundedReceiver<Event>,
        shutdown: CancellationToken,
    ) -> Result<(), Error> {
        loop {
            if self.hard_stopped {
                return Ok(());
            }
            if self.shutting_down && self.jobs.is_empty() {
                // Nothing left to report: a stream not yet welcomed has nothing to drain.
                match &self.session {
                    None => return Ok(()),
                    Some(s) if !s.welcomed => {
                        self.abort_session();
                        return Ok(());
                    }
                    Some(_) => {}
                }
            }
            if self.session.is_none() && self.reconnect_at.is_none() {
                self.open_session(&client, token.clone());
            }
            let deadline = [self.next_heartbeat, self.grace_at, self.hard_at, self.reconnect_at, self.connect_deadline, self.close_deadline]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                ev = events.recv() => {
                    // The core holds a sender itself, so the channel never closes.
                    let Some(ev) = ev else { return Ok(()) };
                    self.on_event(ev).await?;
                    // Take what else is waiting before the timers: a burst of messages is
                    // handled without a select per message.
                    for _ in 0..256 {
                        match events.try_recv() {
                            Ok(ev) => self.on_event(ev).await?,
                            Err(_) => break,
                        }
                    }
                }
                Some(t) = self.timers.next(), if !self.timers.is_empty() => self.on_timer(t.into_inner()),
                _ = sleep_until(deadline) => self.on_deadlines(Instant::now()),
                _ = shutdown.cancelled(), if !self.shutting_down => self.shutdown(),
            }
        }
    }

    async fn on_event(&mut self, ev: Event) -> Result<(), Error> {
        match ev {
            Event::Msg(sid, msg) if self.session.as_ref().is_some_and(|s| s.id == sid) => self.on_message(msg),
            Event::Ended(sid, res) if self.session.as_ref().is_some_and(|s| s.id == sid) => return self.on_session_end(res).await,
            Event::Done { job_id, seq, outcome } => self.on_done(job_id, seq, outcome),
            Event::Progress { job_id, seq, send, due_at } => self.on_progress(job_id, seq, send, due_at),
            _ => {} // from a stream that is already over
        }
        Ok(())
    }

    // ---- streams ---------------------------------------------------------------------------

    fn open_session(
        &mut self,
        client: &WorkerServiceClient<tonic::transport::Channel>,
        token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    ) {
        self.next_sid += 1;
        let sid = self.next_sid;
        let (tx, rx) = mpsc::unbounded_channel();
        let hello = pb::Hello {
            worker_id: self.cfg.worker_id.clone(),
            job_types: self.handlers.keys().cloned().collect(),
            queues: self.cfg.queues.clone(),
            capacity: self.cfg.capacity as i32,
            held: self.jobs.values().map(|j| j.lease.clone()).collect(),
            movable: self.cfg.movable,
            // The broker may send what is ready together as one batch; this worker unpacks it
            // (on_message). It sends its own messages one by one.
            accepts_batches: true,
        };
        let _ = tx.send(request(pb::connect_request::Message::Hello(hello)));
        let mut client = client.clone();
        let events = self.events.clone();
        let task = tokio::spawn(async move {
            let mut req = tonic::Request::new(UnboundedReceiverStream::new(rx));
            if let Some(t) = token {
                req.metadata_mut().insert("authorization", t);
            }
            let res = async {
                let mut stream = client.connect(req).await?.into_inner();
                while let Some(msg) = stream.message().await? {
                    if events.send(Event::Msg(sid, msg)).is_err() {
                        break;
                    }
                }
                Ok(())
            }
            .await;
            let _ = events.send(Event::Ended(sid, res));
        });
        self.session = Some(Session { id: sid, out: Some(tx), task, welcomed: false, drain_requested: false });
        self.connect_deadline = Some(Instant::now() + self.cfg.connect_timeout);
    }

    fn abort_session(&mut self) {
        if let Some(s) = self.session.take() {
            s.task.abort();
        }
        self.after_stream();
    }

    /// What every end of a stream resets.
    fn after_stream(&mut self) {
        self.session = None;
        // Never-started jobs go back to PENDING when a stream ends; every held job here has
        // started, so only pending releases are forgotten.
        self.releases.clear();
        self.next_heartbeat = None;
        self.connect_deadline = None;
        self.close_deadline = None;
    }

    async fn on_session_end(&mut self, res: Result<(), tonic::Status>) -> Result<(), Error> {
        let welcomed = self.session.as_ref().is_some_and(|s| s.welcomed);
        self.after_stream();
        match res {
            Ok(()) => tracing::info!("stream to {} closed", self.cfg.settings.address),
            Err(status) => {
                if !welcomed {
                    if let Some(e) = connect::classify(&status, &self.cfg.settings).await {
                        tracing::error!("cannot connect to the broker at {}: {e}", self.cfg.settings.address);
                        return Err(Error::Connect(e));
                    }
                }
                if PERMANENT_CODES.contains(&status.code()) {
                    tracing::error!("broker rejected the worker: {}", connect::describe(&status));
                    return Err(Error::Rejected(status));
                }
                tracing::warn!("stream failed: {:?} {}", status.code(), connect::describe(&status));
            }
        }
        self.schedule_reconnect();
        Ok(())
    }

    fn schedule_reconnect(&mut self) {
        if self.hard_stopped || (self.shutting_down && self.jobs.is_empty()) {
            return;
        }
        let delay = self.backoff.next_delay();
        tracing::info!("reconnecting in {}ms", delay.as_millis());
        self.reconnect_at = Some(Instant::now() + delay);
    }

    /// Writes msg on the current stream once welcomed; without one it is dropped (results and
    /// Started are sent again on the next stream).
    fn send(&self, msg: pb::connect_request::Message) {
        if let Some(Session { out: Some(out), welcomed: true, .. }) = &self.session {
            let _ = out.send(request(msg));
        }
    }

    /// Half-closes the stream once draining and nothing is held any more.
    fn maybe_close(&mut self) {
        let draining = self.shutting_down;
        let Some(s) = &mut self.session else { return };
        if !s.welcomed || s.out.is_none() || !(draining || s.drain_requested) || !self.jobs.is_empty() {
            return;
        }
        s.out = None; // dropping the sender ends the request stream: the half-close
        self.next_heartbeat = None;
        // If the broker does not end the stream in time, give up on it.
        self.close_deadline = Some(Instant::now() + self.cfg.finish_timeout);
    }

    // ---- broker messages --------------------------------------------------------------------

    fn on_message(&mut self, resp: pb::ConnectResponse) {
        use pb::connect_response::Message as M;
        let Some(msg) = resp.message else { return };
        if let M::Batch(batch) = msg {
            // Several messages in one: handled in order, as if they had come one by one.
            for m in batch.messages {
                self.on_message(m);
            }
            return;
        }
        let welcomed = self.session.as_ref().is_some_and(|s| s.welcomed);
        if !welcomed {
            match msg {
                M::Welcome(w) => self.on_welcome(w),
                other => {
                    tracing::warn!("expected Welcome, got {other:?}: ending the stream");
                    self.abort_session();
                    self.schedule_reconnect();
                }
            }
            return;
        }
        match msg {
            M::Assignment(a) => self.on_assignment(a),
            M::ResultAck(ack) => {
                if self.jobs.get(&ack.job_id).is_some_and(|j| j.lease.lease_token == ack.lease_token) {
                    self.jobs.remove(&ack.job_id);
                    tracing::debug!("job {} result stored: {:?}", ack.job_id, ack.decision());
                    self.after_free();
                }
            }
            M::Refused(r) => self.on_refused(r),
            M::Cancel(c) => {
                if self.jobs.get(&c.job_id).is_some_and(|j| j.lease.lease_token == c.lease_token) {
                    let reason = match c.reason() {
                        pb::CancelReason::Timeout => CancelReason::Timeout,
                        pb::CancelReason::LeaseLost => CancelReason::LeaseLost,
                        _ => CancelReason::Requested,
                    };
                    tracing::info!("job {} cancelled by the broker ({reason})", c.job_id);
                    self.drop_job(c.job_id, reason);
                }
            }
            M::Drain(d) => {
                tracing::info!("the broker asked to drain: {}", d.reason);
                if let Some(s) = &mut self.session {
                    s.drain_requested = true;
                }
                self.maybe_close();
            }
            M::HeartbeatAck(ack) => self.on_extended(ack.extended),
            M::Welcome(_) => tracing::warn!("a second Welcome on one stream: ignored"),
            M::Batch(_) => unreachable!("batches are unpacked above"),
        }
    }

    fn on_welcome(&mut self, w: pb::Welcome) {
        let now = Instant::now();
        let lease = w.lease_duration.map(duration).unwrap_or_default();
        let mut hb = w.heartbeat_interval.map(duration).unwrap_or_default();
        if hb.is_zero() {
            hb = if lease.is_zero() { Duration::from_secs(10) } else { lease / 3 };
        }
        self.heartbeat_every = hb;
        self.max_result_bytes = w.max_result_bytes.max(0) as usize;
        self.lease_allowance = (!lease.is_zero()).then(|| lease - lease::margin(lease, hb));
        if let Some(s) = &mut self.session {
            s.welcomed = true;
        }
        self.connect_deadline = None;
        self.backoff.reset();
        self.next_heartbeat = Some(now + hb);
        // Heartbeats of the old stream are never answered; adopted leases keep their deadlines.
        for j in self.jobs.values_mut() {
            j.heartbeat_at = None;
        }
        tracing::info!(
            "connected to {} as {} (session {}, lease {}ms, heartbeat {}ms, holding {})",
            self.cfg.settings.address,
            self.cfg.worker_id,
            w.session_id,
            lease.as_millis(),
            hb.as_millis(),
            self.jobs.len()
        );
        for l in w.lost {
            if self.jobs.get(&l.job_id).is_some_and(|j| j.lease.lease_token == l.lease_token) {
                tracing::warn!("lease of job {} lost while disconnected", l.job_id);
                self.drop_job(l.job_id, CancelReason::LeaseLost);
            }
        }
        if self.shutting_down {
            self.send(pb::connect_request::Message::Drain(pb::Drain {}));
        }
        // Started again for a job still running: the old stream may have ended before the broker
        // read it, and then the adopted lease is not started there. A broker that has it ignores it.
        let again: Vec<_> = self
            .jobs
            .values()
            .map(|j| match &j.result {
                Some(r) => pb::connect_request::Message::Result(r.clone()),
                None => pb::connect_request::Message::Started(started(&j.lease)),
            })
            .collect();
        for m in again {
            self.send(m);
        }
        self.maybe_close();
    }

    fn on_assignment(&mut self, a: pb::Assignment) {
        let Some(job) = a.job else { return };
        let job_id = job.id;
        if let Some(old) = self.jobs.get(&job_id) {
            if old.lease.lease_token == a.lease_token {
                return; // a duplicate of what runs
            }
            // A newer lease on the same job: ours is stale, so its outcome must not be reported.
            self.drop_job(job_id, CancelReason::LeaseLost);
        }
        let draining = self.shutting_down || self.session.as_ref().is_some_and(|s| s.drain_requested);
        let handler = self.handlers.get(&job.r#type).cloned();
        let reason = if draining {
            "worker is draining".to_string()
        } else if handler.is_none() {
            format!("no handler for job type {}", job.r#type)
        } else if self.jobs.len() >= self.cfg.capacity as usize {
            "worker is at capacity".to_string()
        } else {
            String::new()
        };
        let Some(handler) = handler.filter(|_| reason.is_empty()) else {
            tracing::info!("releasing job {job_id}: {reason}");
            let rel = pb::Release { job_id, lease_token: a.lease_token, reason };
            self.releases.insert(job_id, rel.clone());
            self.send(pb::connect_request::Message::Release(rel));
            return;
        };
        self.next_seq += 1;
        let seq = self.next_seq;
        let lease_ref = pb::LeaseRef { job_id, lease_token: a.lease_token.clone() };
        let attempt_timeout = a.attempt_timeout.map(duration).filter(|d| !d.is_zero());
        let cancel = Cancellation::default();
        let progress = Arc::new(ProgressSink {
            job_id,
            seq,
            lease_token: a.lease_token.clone(),
            throttle: Mutex::new(Throttle::new(self.progress_interval)),
            events: self.events.clone(),
        });
        let ctx = Job {
            id: job_id,
            job_type: job.r#type,
            queue: job.queue,
            payload: job.payload.into(),
            attempt: a.attempt.max(0) as u32,
            max_attempts: job.max_attempts.max(0) as u32,
            lease_token: a.lease_token,
            attempt_timeout,
            metadata: Arc::new(job.metadata),
            parent_results: a.parent_results.into_iter().map(ParentResult::from_wire).collect(),
            cancel: cancel.clone(),
            progress: progress.clone(),
        };
        let mut held = Held {
            seq,
            cancel,
            lease: lease_ref.clone(),
            attempt_timeout,
            result: None,
            lease_end: None,
            heartbeat_at: None,
            timed_out: false,
            progress,
        };
        let now = Instant::now();
        self.arm_lease(&mut held, now);
        if let Some(t) = attempt_timeout {
            // The handler is told to stop once its attempt timeout has passed; it reports that as
            // the timeout it is (Failure.timed_out), not as an ordinary transient failure.
            self.timers.insert_at(Timer::AttemptTimeout { job_id, seq }, now + t);
        }
        self.jobs.insert(job_id, held);
        // Started must reach the broker before user code runs: the attempt counts from here.
        self.send(pb::connect_request::Message::Started(started(&lease_ref)));
        tracing::debug!("job {job_id} attempt {} started", a.attempt);
        let events = self.events.clone();
        tokio::spawn(async move {
            let outcome = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind().await.unwrap_or_else(|panic| {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "the handler panicked".into());
                Err(JobError::panic(msg))
            });
            let _ = events.send(Event::Done { job_id, seq, outcome });
        });
    }

    fn on_refused(&mut self, r: pb::Refused) {
        const UNAVAILABLE: u32 = Code::Unavailable as u32;
        let what = r.refused_message();
        if what == pb::RefusedMessage::Release {
            if self.releases.get(&r.job_id).is_some_and(|rel| rel.lease_token == r.lease_token) {
                if r.code == UNAVAILABLE {
                    let at = self.resend_at();
                    self.timers.insert_at(Timer::ResendRelease { job_id: r.job_id, token: r.lease_token }, at);
                } else {
                    self.releases.remove(&r.job_id);
                }
            }
            return;
        }
        let Some(j) = self.jobs.get(&r.job_id).filter(|j| j.lease.lease_token == r.lease_token) else { return };
        let (job_id, seq, has_result) = (r.job_id, j.seq, j.result.is_some());
        if r.code == UNAVAILABLE {
            let at = self.resend_at();
            match what {
                pb::RefusedMessage::Result => {
                    self.timers.insert_at(Timer::ResendResult { job_id, seq }, at);
                }
                pb::RefusedMessage::Started if !has_result => {
                    self.timers.insert_at(Timer::ResendStarted { job_id, seq }, at);
                }
                _ => {} // a refused heartbeat is repeated by the next tick anyway
            }
            return;
        }
        if what == pb::RefusedMessage::Progress && r.code == Code::InvalidArgument as u32 {
            tracing::warn!("the broker refused a progress report of job {job_id}: {}", r.message);
            return; // progress is advisory: the job goes on
        }
        if matches!(what, pb::RefusedMessage::Heartbeat | pb::RefusedMessage::Progress) && has_result {
            return; // the Result's own answer settles it
        }
        tracing::warn!("the broker refused {what:?} of job {job_id} (code {}: {}); dropping the job", r.code, r.message);
        self.drop_job(job_id, CancelReason::LeaseLost);
    }

    /// Moves the deadline of every lease a HeartbeatAck lists as extended.
    fn on_extended(&mut self, extended: Vec<pb::LeaseRef>) {
        let now = Instant::now();
        for l in extended {
            let Some(mut j) = self.jobs.remove(&l.job_id) else { continue };
            if j.lease.lease_token == l.lease_token {
                let start = j.heartbeat_at.take().map_or(now, |t| t.min(now));
                if j.result.is_none() {
                    self.arm_lease(&mut j, start);
                }
            }
            self.jobs.insert(l.job_id, j);
        }
    }

    fn heartbeat(&mut self) {
        // Every held lease, including ones whose result is not yet answered: the lease must
        // outlive a broker that is slow to store the result.
        if self.jobs.is_empty() {
            return;
        }
        let now = Instant::now();
        let leases = self
            .jobs
            .values_mut()
            .map(|j| {
                j.heartbeat_at.get_or_insert(now);
                j.lease.clone()
            })
            .collect();
        self.send(pb::connect_request::Message::Heartbeat(pb::Heartbeat { leases }));
    }

    // ---- handlers and timers ----------------------------------------------------------------

    fn on_done(&mut self, job_id: i64, seq: u64, outcome: Result<Vec<u8>, JobError>) {
        let limit = self.max_result_bytes;
        let Some(j) = self.jobs.get_mut(&job_id).filter(|j| j.seq == seq && j.result.is_none()) else {
            return; // cancelled, lost or reported meanwhile: its outcome is dropped
        };
        // Nothing after the result; what was held back goes right before it.
        let last = j.progress.close();
        let outcome = match outcome {
            Ok(result) if limit > 0 && result.len() > limit => {
                let f = result_too_large(job_id, result.len(), limit);
                tracing::info!("job {job_id} failed (Fatal): {}", f.message);
                pb::result::Outcome::Failure(f)
            }
            Ok(result) => pb::result::Outcome::Success(pb::Success { result }),
            Err(e) if j.timed_out => {
                let timeout = j.attempt_timeout.unwrap_or_default();
                pb::result::Outcome::Failure(pb::Failure {
                    kind: pb::FailureKind::Transient as i32,
                    error_type: e.error_type().to_string(),
                    message: if e.message().is_empty() {
                        format!("attempt timeout of {}ms exceeded", timeout.as_millis())
                    } else {
                        e.message().to_string()
                    },
                    details: e.details().to_string(),
                    retry_after: None,
                    timed_out: true,
                })
            }
            Err(e) => {
                tracing::info!("job {job_id} failed ({:?}): {}: {}", e.kind(), e.error_type(), e.message());
                pb::result::Outcome::Failure(failure(&e))
            }
        };
        j.lease_end = None; // the result is sent whatever becomes of the lease now
        let result = pb::Result { job_id, lease_token: j.lease.lease_token.clone(), outcome: Some(outcome) };
        j.result = Some(result.clone());
        if let Some(p) = last {
            self.send(pb::connect_request::Message::Progress(p));
        }
        self.send(pb::connect_request::Message::Result(result));
    }

    /// Sends what a job's throttle let through, and schedules the flush of what it held back,
    /// while the job runs.
    fn on_progress(&mut self, job_id: i64, seq: u64, send: Option<pb::Progress>, due_at: Option<Instant>) {
        if !self.jobs.get(&job_id).is_some_and(|j| j.seq == seq && j.result.is_none()) {
            return;
        }
        if let Some(p) = send {
            self.send(pb::connect_request::Message::Progress(p));
        }
        if let Some(at) = due_at {
            self.timers.insert_at(Timer::Progress { job_id, seq }, at);
        }
    }

    fn on_timer(&mut self, t: Timer) {
        use pb::connect_request::Message as Out;
        let now = Instant::now();
        match t {
            Timer::Lease { job_id, seq } => {
                let ran_out = self.jobs.get(&job_id).is_some_and(|j| {
                    j.seq == seq && j.result.is_none() && j.lease_end.is_some_and(|end| end <= now)
                });
                if ran_out {
                    tracing::warn!("job {job_id}: its lease ran out without an extension from the broker; cancelling it");
                    self.drop_job(job_id, CancelReason::LeaseLost);
                }
            }
            Timer::AttemptTimeout { job_id, seq } => {
                if let Some(j) = self.jobs.get_mut(&job_id).filter(|j| j.seq == seq && j.result.is_none()) {
                    tracing::warn!("job {job_id} outlived its attempt timeout: cancelling it");
                    j.timed_out = true;
                    j.cancel.cancel(CancelReason::Timeout);
                }
            }
            Timer::ResendResult { job_id, seq } => {
                if let Some(r) = self.jobs.get(&job_id).filter(|j| j.seq == seq).and_then(|j| j.result.clone()) {
                    self.send(Out::Result(r));
                }
            }
            Timer::ResendStarted { job_id, seq } => {
                if let Some(l) = self.jobs.get(&job_id).filter(|j| j.seq == seq && j.result.is_none()).map(|j| started(&j.lease)) {
                    self.send(Out::Started(l));
                }
            }
            Timer::Progress { job_id, seq } => {
                // Unless its throttle was closed meanwhile: the result went, or the job was dropped.
                let due = self.jobs.get(&job_id).filter(|j| j.seq == seq).and_then(|j| j.progress.due(now));
                if let Some(p) = due {
                    self.send(Out::Progress(p));
                }
            }
            Timer::ResendRelease { job_id, token } => {
                if let Some(rel) = self.releases.get(&job_id).filter(|r| r.lease_token == token).cloned() {
                    self.send(Out::Release(rel));
                }
            }
        }
    }

    fn on_deadlines(&mut self, now: Instant) {
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            self.next_heartbeat = Some(now + self.heartbeat_every);
            self.heartbeat();
        }
        if self.grace_at.is_some_and(|t| t <= now) {
            self.grace_at = None;
            self.grace_over();
        }
        if self.hard_at.is_some_and(|t| t <= now) {
            self.hard_at = None;
            if !self.jobs.is_empty() {
                tracing::error!("giving up on {} unreported job(s)", self.jobs.len());
            }
            self.hard_stopped = true;
            self.abort_session();
        }
        if self.reconnect_at.is_some_and(|t| t <= now) {
            self.reconnect_at = None;
        }
        if self.connect_deadline.is_some_and(|t| t <= now) {
            tracing::warn!("no Welcome within {}ms: reconnecting", self.cfg.connect_timeout.as_millis());
            self.abort_session();
            self.schedule_reconnect();
        }
        if self.close_deadline.is_some_and(|t| t <= now) {
            tracing::warn!("the broker did not end the stream after the half-close: leaving it");
            self.abort_session();
            self.schedule_reconnect();
        }
    }

    /// Starts a graceful shutdown: Drain, then let running jobs finish within the grace period.
    fn shutdown(&mut self) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        tracing::info!(
            "shutting down: draining, {} job(s) running, grace {}ms",
            self.jobs.len(),
            self.cfg.grace_period.as_millis()
        );
        self.send(pb::connect_request::Message::Drain(pb::Drain {}));
        let now = Instant::now();
        self.grace_at = Some(now + self.cfg.grace_period);
        self.hard_at = Some(now + self.cfg.grace_period + self.cfg.finish_timeout);
        self.after_free();
    }

    /// Cancels what still runs and reports it as a transient WorkerShutdown failure: that report
    /// is the attempt's one Result, and the handler's own outcome, if it comes, is dropped.
    fn grace_over(&mut self) {
        let mut out = Vec::new();
        for (id, j) in self.jobs.iter_mut().filter(|(_, j)| j.result.is_none()) {
            tracing::warn!("grace period over: cancelling job {id}");
            j.cancel.cancel(CancelReason::Shutdown);
            j.progress.close(); // a cut-off handler's last report is not worth sending
            j.lease_end = None;
            let result = pb::Result {
                job_id: *id,
                lease_token: j.lease.lease_token.clone(),
                outcome: Some(pb::result::Outcome::Failure(pb::Failure {
                    kind: pb::FailureKind::Transient as i32,
                    error_type: SHUTDOWN_ERROR_TYPE.into(),
                    message: "the worker shut down before the job finished".into(),
                    details: String::new(),
                    retry_after: None,
                    timed_out: false,
                })),
            };
            j.result = Some(result.clone());
            out.push(result);
        }
        for r in out {
            self.send(pb::connect_request::Message::Result(r));
        }
    }

    /// (Re)starts j's lease count at `start`: it is given up at start + the lease allowance unless
    /// an extension moves it first.
    fn arm_lease(&mut self, j: &mut Held, start: Instant) {
        let Some(allowance) = self.lease_allowance else { return };
        let end = start + allowance;
        j.lease_end = Some(end);
        self.timers.insert_at(Timer::Lease { job_id: j.lease.job_id, seq: j.seq }, end);
    }

    /// Forgets a job the broker has settled: its handler is cancelled and its outcome dropped.
    fn drop_job(&mut self, job_id: i64, reason: CancelReason) {
        if let Some(j) = self.jobs.remove(&job_id) {
            j.progress.close(); // the job is gone: its reports too
            j.cancel.cancel(reason);
        }
        self.after_free();
    }

    fn after_free(&mut self) {
        self.maybe_close();
    }

    fn resend_at(&self) -> Instant {
        Instant::now() + self.cfg.resend_delay.mul_f64(1.0 + fastrand::f64())
    }

    /// Cancels every handler still running when run() ends.
    fn stop_all(&mut self) {
        for (_, j) in self.jobs.drain() {
            j.cancel.cancel(CancelReason::Shutdown);
        }
        if let Some(s) = self.session.take() {
            s.task.abort();
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn request(m: pb::connect_request::Message) -> pb::ConnectRequest {
    pb::ConnectRequest { message: Some(m) }
}

fn started(l: &pb::LeaseRef) -> pb::Started {
    pb::Started { job_id: l.job_id, lease_token: l.lease_token.clone() }
}

fn duration(d: prost_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, d.nanos as u32)
}

/// The wire Failure of a handler's error.
pub(crate) fn failure(e: &JobError) -> pb::Failure {
    pb::Failure {
        kind: match e.kind() {
            Kind::Fatal => pb::FailureKind::Fatal,
            Kind::Transient => pb::FailureKind::Transient,
        } as i32,
        error_type: e.error_type().to_string(),
        message: e.message().to_string(),
        details: e.details().to_string(),
        retry_after: e.retry_after_duration().map(|d| prost_types::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }),
        timed_out: false,
    }
}

#[cfg(test)]
mod tests {
    //! The core against a scripted broker: the test plays the broker's messages and reads what
    //! the worker writes, on tokio's paused clock, so that leases run out without waiting.

    use super::*;
    use pb::connect_request::Message as Out;
    use pb::connect_response::Message as In;

    struct Bundle {
        core: Core,
        out: mpsc::UnboundedReceiver<pb::ConnectRequest>,
        events: mpsc::UnboundedReceiver<Event>,
    }

    /// A core with handlers "ok" (succeeds), "wait" (returns once cancelled, with an error) and
    /// "boom" (panics), on a welcomed stream with a 3 s lease and 1 s heartbeats.
    fn setup(capacity: u32) -> Bundle {
        let mut b = Worker::builder().capacity(capacity).grace_period(Duration::from_secs(5));
        b = b
            .handle("ok", |_job: Job| async { Ok::<_, JobError>(()) })
            .handle("wait", |job: Job| async move {
                let reason = job.cancelled().await;
                Err::<(), _>(JobError::transient(format!("cancelled: {reason}")))
            })
            .handle("boom", |_job: Job| async move {
                if true {
                    panic!("handler bug");
                }
                Ok::<_, JobError>(())
            })
            .handle("value", |job: Job| async move { Ok::<_, JobError>(job.payload().to_vec()) })
            .handle_json("parents", |job: Job, _: serde_json::Value| async move {
                let names: Vec<_> = job.parent_results().iter().map(|p| (p.job_id, p.job_type.clone(), p.state)).collect();
                Ok::<_, JobError>(crate::Json((format!("{names:?}"), job.parent_results()[0].json::<serde_json::Value>()?)))
            })
            .handle("steps", |job: Job| async move {
                for i in 1..=5 {
                    job.progress(Some(i as f64 / 5.0), format!("step {i}"))?;
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
                job.progress(None, "late 1")?;
                job.progress(None, "late 2")?; // held back: it goes right before the result
                Ok::<_, JobError>("done")
            });
        let (tx, events) = mpsc::unbounded_channel();
        let mut core = Core::new(Arc::new(b.cfg), Arc::new(b.handlers), tx);
        let (out_tx, out) = mpsc::unbounded_channel();
        core.session = Some(Session { id: 1, out: Some(out_tx), task: tokio::spawn(async {}), welcomed: false, drain_requested: false });
        core.on_message(msg(In::Welcome(pb::Welcome {
            session_id: "s1".into(),
            lease_duration: Some(prost_types::Duration { seconds: 3, nanos: 0 }),
            heartbeat_interval: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
            lost: vec![],
            max_result_bytes: 16,
        })));
        Bundle { core, out, events }
    }

    fn msg(m: In) -> pb::ConnectResponse {
        pb::ConnectResponse { message: Some(m) }
    }

    fn assignment(id: i64, job_type: &str, token: &str) -> pb::ConnectResponse {
        msg(In::Assignment(pb::Assignment {
            job: Some(pb::Job { id, r#type: job_type.into(), payload: b"{}".to_vec(), ..Default::default() }),
            attempt: 1,
            lease_token: token.into(),
            ..Default::default()
        }))
    }

    impl Bundle {
        /// Every message the worker has written so far.
        fn sent(&mut self) -> Vec<Out> {
            let mut v = Vec::new();
            while let Ok(r) = self.out.try_recv() {
                v.extend(r.message);
            }
            v
        }

        /// Waits for the next handler to return and hands its outcome to the core.
        async fn handler_returns(&mut self) {
            let ev = self.events.recv().await.expect("a handler event");
            self.core.on_event(ev).await.unwrap();
        }

        /// Hands the core every event until a handler's outcome.
        async fn until_done(&mut self) {
            loop {
                let ev = self.events.recv().await.expect("a handler event");
                let done = matches!(ev, Event::Done { .. });
                self.core.on_event(ev).await.unwrap();
                if done {
                    return;
                }
            }
        }

        /// Moves the paused clock by d and fires the timers that are due.
        async fn advance(&mut self, d: Duration) {
            tokio::time::advance(d).await;
            while let Ok(Some(t)) = tokio::time::timeout(Duration::ZERO, self.core.timers.next()).await {
                self.core.on_timer(t.into_inner());
            }
            self.core.on_deadlines(Instant::now());
        }
    }

    fn result_of(sent: &[Out], id: i64) -> Option<pb::Result> {
        sent.iter().find_map(|m| match m {
            Out::Result(r) if r.job_id == id => Some(r.clone()),
            _ => None,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn started_goes_before_the_handler_and_the_result_waits_for_its_ack() {
        let mut b = setup(4);
        b.core.on_message(assignment(1, "ok", "t1"));
        b.handler_returns().await;
        let sent = b.sent();
        assert!(matches!(&sent[0], Out::Started(s) if s.job_id == 1 && s.lease_token == "t1"), "{sent:?}");
        let r = result_of(&sent, 1).expect("a result");
        assert!(matches!(r.outcome, Some(pb::result::Outcome::Success(_))));
        assert_eq!(b.core.jobs.len(), 1, "the slot stays busy until the ack");
        // An ack of another lease of the same job changes nothing; the right one frees the slot.
        b.core.on_message(msg(In::ResultAck(pb::ResultAck { job_id: 1, lease_token: "other".into(), ..Default::default() })));
        assert_eq!(b.core.jobs.len(), 1);
        b.core.on_message(msg(In::ResultAck(pb::ResultAck { job_id: 1, lease_token: "t1".into(), ..Default::default() })));
        assert!(b.core.jobs.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_is_a_fatal_failure() {
        let mut b = setup(4);
        b.core.on_message(assignment(2, "boom", "t2"));
        b.handler_returns().await;
        let Some(pb::result::Outcome::Failure(f)) = result_of(&b.sent(), 2).and_then(|r| r.outcome) else { panic!("no failure") };
        assert_eq!((f.kind(), f.error_type.as_str(), f.message.as_str()), (pb::FailureKind::Fatal, "panic", "handler bug"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_not_extended_is_given_up_before_the_broker_would() {
        let mut b = setup(4);
        b.core.on_message(assignment(3, "wait", "t3"));
        // Heartbeats go out, but the broker (frozen) answers none: the lease runs out at 3 s
        // less the margin (a tenth: 300 ms) on the worker's clock.
        b.advance(Duration::from_millis(2_600)).await;
        let sent = b.sent();
        assert!(sent.iter().any(|m| matches!(m, Out::Heartbeat(h) if h.leases.len() == 1)), "{sent:?}");
        assert_eq!(b.core.jobs.len(), 1, "still held before the deadline");
        b.advance(Duration::from_millis(100)).await;
        assert!(b.core.jobs.is_empty(), "given up once the lease ran out");
        // The handler saw lease_lost, and its outcome is never reported.
        b.handler_returns().await;
        assert!(result_of(&b.sent(), 3).is_none(), "no result for a lost lease");
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_counts_from_the_heartbeat_that_asked_for_it() {
        let mut b = setup(4);
        b.core.on_message(assignment(4, "wait", "t4"));
        b.advance(Duration::from_millis(1_000)).await; // the first heartbeat goes out at 1 s
        b.advance(Duration::from_millis(500)).await; // and its ack arrives at 1.5 s
        b.core.on_message(msg(In::HeartbeatAck(pb::HeartbeatAck {
            extended: vec![pb::LeaseRef { job_id: 4, lease_token: "t4".into() }],
            lease_deadline: None,
        })));
        // Counted from 1 s, not 1.5 s: given up at 1 + 2.7 s.
        b.advance(Duration::from_millis(2_100)).await; // 3.6 s
        assert_eq!(b.core.jobs.len(), 1);
        b.advance(Duration::from_millis(100)).await; // 3.7 s
        assert!(b.core.jobs.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_reaches_the_handler_and_drops_its_outcome() {
        let mut b = setup(4);
        b.core.on_message(assignment(5, "wait", "t5"));
        b.core.on_message(msg(In::Cancel(pb::Cancel { job_id: 5, lease_token: "stale".into(), reason: pb::CancelReason::Requested as i32 })));
        assert_eq!(b.core.jobs.len(), 1, "a cancel of another lease is ignored");
        b.core.on_message(msg(In::Cancel(pb::Cancel { job_id: 5, lease_token: "t5".into(), reason: pb::CancelReason::Requested as i32 })));
        assert!(b.core.jobs.is_empty());
        b.handler_returns().await;
        assert!(result_of(&b.sent(), 5).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_assignment_beyond_capacity_or_while_draining_is_released() {
        let mut b = setup(1);
        b.core.on_message(assignment(6, "wait", "t6"));
        b.core.on_message(assignment(7, "ok", "t7"));
        b.core.on_message(assignment(8, "unknown", "t8"));
        let released: Vec<(i64, String)> = b
            .sent()
            .into_iter()
            .filter_map(|m| match m {
                Out::Release(r) => Some((r.job_id, r.reason)),
                _ => None,
            })
            .collect();
        assert_eq!(
            released,
            vec![(7, "worker is at capacity".to_string()), (8, "no handler for job type unknown".to_string())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_from_the_broker_is_handled_in_order() {
        let mut b = setup(1);
        b.core.on_message(msg(In::Batch(pb::ConnectResponseBatch {
            messages: vec![assignment(6, "wait", "t6"), assignment(7, "ok", "t7")],
        })));
        // In order: the first takes the only slot, so the second is handed back.
        let sent: Vec<(&str, i64)> = b
            .sent()
            .iter()
            .map(|m| match m {
                Out::Started(s) => ("started", s.job_id),
                Out::Release(r) => ("release", r.job_id),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(sent, vec![("started", 6), ("release", 7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drains_then_reports_what_outlives_the_grace_as_worker_shutdown() {
        let mut b = setup(4);
        b.core.lease_allowance = None; // leases are not the point here
        b.core.on_message(assignment(9, "wait", "t9"));
        b.core.shutdown();
        assert!(b.sent().iter().any(|m| matches!(m, Out::Drain(_))));
        b.core.on_message(assignment(10, "ok", "t10"));
        assert!(b.sent().iter().any(|m| matches!(m, Out::Release(r) if r.job_id == 10 && r.reason == "worker is draining")));
        b.advance(Duration::from_secs(5)).await; // the grace is over
        let Some(pb::result::Outcome::Failure(f)) = result_of(&b.sent(), 9).and_then(|r| r.outcome) else { panic!("no failure") };
        assert_eq!((f.kind(), f.error_type.as_str()), (pb::FailureKind::Transient, SHUTDOWN_ERROR_TYPE));
        // The cancelled handler's own outcome is dropped: the report above is the one Result.
        b.handler_returns().await;
        assert!(result_of(&b.sent(), 9).is_none());
        assert!(b.core.session.as_ref().unwrap().out.is_some(), "no half-close while a result is unanswered");
        b.core.on_message(msg(In::ResultAck(pb::ResultAck { job_id: 9, lease_token: "t9".into(), ..Default::default() })));
        assert!(b.core.session.as_ref().unwrap().out.is_none(), "half-closed once every result is answered");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_timeout_is_reported_as_a_timeout() {
        let mut b = setup(4);
        let mut a = assignment(11, "wait", "t11");
        if let Some(In::Assignment(x)) = &mut a.message {
            x.attempt_timeout = Some(prost_types::Duration { seconds: 1, nanos: 0 });
        }
        b.core.on_message(a);
        b.core.on_message(msg(In::HeartbeatAck(pb::HeartbeatAck { extended: vec![], lease_deadline: None })));
        b.advance(Duration::from_secs(1)).await;
        b.handler_returns().await;
        let Some(pb::result::Outcome::Failure(f)) = result_of(&b.sent(), 11).and_then(|r| r.outcome) else { panic!("no failure") };
        assert!(f.timed_out, "{f:?}");
        assert!(f.message.contains("timeout"), "{f:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconnect_lists_held_leases_and_resends_results() {
        let mut b = setup(4);
        b.core.on_message(assignment(12, "ok", "t12"));
        b.core.on_message(assignment(13, "wait", "t13"));
        b.handler_returns().await;
        b.sent();
        b.core.abort_session(); // the stream broke
        let (out_tx, out) = mpsc::unbounded_channel();
        b.out = out;
        b.core.session = Some(Session { id: 2, out: Some(out_tx), task: tokio::spawn(async {}), welcomed: false, drain_requested: false });
        b.core.on_message(msg(In::Welcome(pb::Welcome {
            lease_duration: Some(prost_types::Duration { seconds: 3, nanos: 0 }),
            lost: vec![pb::LeaseRef { job_id: 13, lease_token: "t13".into() }],
            ..Default::default()
        })));
        let sent = b.sent();
        assert!(result_of(&sent, 12).is_some(), "the unanswered result is sent again: {sent:?}");
        assert!(!b.core.jobs.contains_key(&13), "a lost lease is dropped");
    }

    fn progress_of(sent: &[Out]) -> Vec<(Option<f64>, String)> {
        sent.iter()
            .filter_map(|m| match m {
                Out::Progress(p) => Some((p.fraction, p.message.clone())),
                _ => None,
            })
            .collect()
    }

    fn assignment_with(id: i64, job_type: &str, payload: &[u8], parents: Vec<pb::ParentResult>) -> pb::ConnectResponse {
        msg(In::Assignment(pb::Assignment {
            job: Some(pb::Job { id, r#type: job_type.into(), payload: payload.to_vec(), ..Default::default() }),
            attempt: 1,
            lease_token: format!("t{id}"),
            parent_results: parents,
            ..Default::default()
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_returned_result_is_sent_and_one_over_the_brokers_limit_is_a_fatal_result_too_large() {
        let mut b = setup(4);
        b.core.on_message(assignment_with(20, "value", &[7; 16], vec![]));
        b.until_done().await;
        let Some(pb::result::Outcome::Success(ok)) = result_of(&b.sent(), 20).and_then(|r| r.outcome) else { panic!("no success") };
        assert_eq!(ok.result, vec![7; 16], "the limit itself is fine");
        b.core.on_message(assignment_with(21, "value", &[7; 17], vec![]));
        b.until_done().await;
        let Some(pb::result::Outcome::Failure(f)) = result_of(&b.sent(), 21).and_then(|r| r.outcome) else { panic!("no failure") };
        assert_eq!((f.kind(), f.error_type.as_str()), (pb::FailureKind::Fatal, "ResultTooLarge"));
        assert!(f.message.contains("is 17 bytes, more than the broker's limit of 16 bytes"), "{}", f.message);
    }

    #[tokio::test(start_paused = true)]
    async fn the_handler_reads_its_parents_results_in_order() {
        let mut b = setup(4);
        let parents = vec![
            pb::ParentResult { job_id: 5, r#type: "fetch".into(), result: b"1".to_vec(), state: pb::JobState::Succeeded as i32 },
            pb::ParentResult { job_id: 6, r#type: "fetch".into(), result: vec![], state: pb::JobState::Dead as i32 },
        ];
        b.core.max_result_bytes = 0; // no limit announced
        b.core.on_message(assignment_with(22, "parents", b"{}", parents));
        b.until_done().await;
        let Some(pb::result::Outcome::Success(ok)) = result_of(&b.sent(), 22).and_then(|r| r.outcome) else { panic!("no success") };
        assert_eq!(String::from_utf8(ok.result).unwrap(), r#"["[(5, \"fetch\", Succeeded), (6, \"fetch\", Dead)]",1]"#);
    }

    #[tokio::test(start_paused = true)]
    async fn progress_is_throttled_to_one_a_second_the_last_sent_before_the_result_and_none_after() {
        let mut b = setup(4);
        b.core.on_message(assignment_with(23, "steps", b"{}", vec![]));
        // Report 1 passes; 2 is held back with a flush scheduled; 3..5 replace it.
        for _ in 0..2 {
            let ev = b.events.recv().await.expect("a progress event");
            b.core.on_event(ev).await.unwrap();
        }
        let sent = b.sent();
        assert!(matches!(&sent[0], Out::Started(_)), "{sent:?}");
        assert_eq!(progress_of(&sent), vec![(Some(0.2), "step 1".to_string())]);
        b.advance(Duration::from_millis(999)).await;
        assert_eq!(progress_of(&b.sent()), vec![], "nothing within the second");
        b.advance(Duration::from_millis(1)).await;
        assert_eq!(progress_of(&b.sent()), vec![(Some(1.0), "step 5".to_string())], "the newest report, once the second is over");
        b.until_done().await;
        b.advance(Duration::from_secs(2)).await;
        let sent = b.sent();
        assert_eq!(
            progress_of(&sent),
            vec![(None, "late 1".to_string()), (None, "late 2".to_string())],
            "late 2, held back when the handler returned, goes right before the result; nothing after"
        );
        let last = sent.iter().rfind(|m| !matches!(m, Out::Heartbeat(_)));
        assert!(
            matches!(last, Some(Out::Result(r)) if matches!(&r.outcome, Some(pb::result::Outcome::Success(ok)) if ok.result == b"done")),
            "{sent:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_progress_report_is_only_logged_unless_the_lease_is_stale() {
        let mut b = setup(4);
        let refused = |code: Code| {
            msg(In::Refused(pb::Refused {
                job_id: 24,
                lease_token: "t24".into(),
                refused_message: pb::RefusedMessage::Progress as i32,
                code: code as u32,
                message: "scripted".into(),
            }))
        };
        b.core.on_message(assignment(24, "wait", "t24"));
        b.core.on_message(refused(Code::InvalidArgument));
        b.core.on_message(refused(Code::Unavailable));
        assert!(b.core.jobs.contains_key(&24), "a report that broke a rule, or met a busy store, leaves the job running");
        b.core.on_message(refused(Code::FailedPrecondition));
        assert!(!b.core.jobs.contains_key(&24), "a stale lease is a lost lease");
        b.handler_returns().await;
        assert!(result_of(&b.sent(), 24).is_none(), "the lost job's outcome is dropped");
    }
}
