"""The Jobwire worker: one bidirectional stream to the broker, handlers run per job type.

Everything that touches protocol state runs on one asyncio event loop, so no locks are needed:
one task reads the stream, one task writes it (fed by a queue, because a gRPC stream must have a
single writer), one task heartbeats. Sync handlers run in their own threads and hand their outcome
back to the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Union

import grpc

from jobwire.backoff import Backoff
from jobwire.connect import ConnectError, classify_connect_error, settings_from_env
from jobwire.context import (
    CANCEL_LEASE_LOST,
    CANCEL_REQUESTED,
    CANCEL_SHUTDOWN,
    CANCEL_TIMEOUT,
    JobContext,
    encode_result,
)
from jobwire.errors import JobCancelled, classify, to_failure
from jobwire.lease import lease_margin
from jobwire.progress import PROGRESS_INTERVAL, ProgressThrottle
from jobwire.v1 import job_pb2, worker_service_pb2 as pb, worker_service_pb2_grpc

Handler = Callable[[JobContext], Union[Any, Awaitable[Any]]]

log = logging.getLogger("jobwire")

# The most bytes of one message read from the broker: a job with the largest payload (64 MiB)
# and parents' results a broker may be set to take. gRPC reads 4 MiB unless told otherwise,
# which an assignment passes on a broker whose operator raised max_payload_bytes or
# max_result_bytes; the broker never sends more than it reads itself (docs/protocol.md).
MAX_RECEIVE_BYTES = 96 << 20

# The channel's options unless a channel_factory is given. gRPC's probing of the bandwidth-delay
# product pings the broker for each burst of data read, which with one job at a time is each
# job: an extra frame and wake-up each way. The broker's windows are fixed, so the probe gains
# nothing; off, a Python worker drained 10% more jobs a second (docs/performance-history.md).
CHANNEL_OPTIONS = (
    ("grpc.http2.bdp_probe", 0),
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
)

# gRPC status codes of the Refused message that the protocol gives a meaning to.
CODE_FAILED_PRECONDITION = 9  # stale lease or finished job: drop the message
CODE_UNAVAILABLE = 14  # storage busy: send the message again after a short backoff
CODE_INVALID_ARGUMENT = 3  # a progress report broke a rule: the job goes on

# Stream errors that no reconnect can fix: the worker's configuration is wrong.
_PERMANENT_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)

_CANCEL_REASONS = {
    pb.CANCEL_REASON_REQUESTED: CANCEL_REQUESTED,
    pb.CANCEL_REASON_TIMEOUT: CANCEL_TIMEOUT,
    pb.CANCEL_REASON_LEASE_LOST: CANCEL_LEASE_LOST,
}

_CLOSE = object()  # queued to the writer: half-close the stream

# The most messages one batch frame may hold, in either direction (docs/protocol.md).
MAX_BATCH = 1024
# The most bytes of encoded messages one batch frame gathers: a message that would take it past
# this starts the next frame, one larger goes alone. The broker reads 4 MiB a message by
# default, so results near their limit that are ready together never add up to more.
MAX_BATCH_BYTES = 1 << 20


def tls_credentials(
    tls: bool = False,
    ca_file: Optional[str] = None,
    cert_file: Optional[str] = None,
    key_file: Optional[str] = None,
) -> Optional[grpc.ChannelCredentials]:
    """Channel credentials for TLS from PEM files, or None for plaintext (nothing asked for)."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("tls_cert and tls_key go together: give both or neither")
    if not (tls or ca_file or cert_file):
        return None

    def read(path: Optional[str]) -> Optional[bytes]:
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_file), private_key=read(key_file), certificate_chain=read(cert_file)
    )


def _batchable(msg: Any) -> bool:
    """Whether msg may travel in a batch: Hello and Drain go alone (the writer never sees Hello)."""
    return msg is not _CLOSE and not msg.HasField("drain")


def result_too_large(job_id: int, size: int, limit: int) -> pb.Failure:
    """The FATAL failure of an attempt whose result the broker would not store: retrying
    produces the same result."""
    return pb.Failure(
        kind=job_pb2.FAILURE_KIND_FATAL,
        error_type="ResultTooLarge",
        message=f"the result of job {job_id} is {size} bytes, more than the broker's limit of {limit} bytes",
    )


class ProtocolError(Exception):
    """The broker broke the protocol (for example, did not answer Hello with Welcome)."""


@dataclass
class _Job:
    """A job this worker holds: it counts against capacity until acknowledged, refused or cancelled."""

    ctx: JobContext
    task: Optional[asyncio.Task] = None
    result: Optional[pb.Result] = None  # set once the handler finished; re-sent until answered
    attempt_timer: Optional[asyncio.TimerHandle] = None  # stops the handler at attempt_timeout
    shutdown_cancelled: bool = False
    timed_out: bool = False  # the attempt timeout passed and the handler was told to stop
    # The lease as this worker counts it (jobwire.lease): lease_timer gives the job up at
    # lease_end (loop time) unless an extension moves it first. heartbeat_at is when the oldest
    # heartbeat that named the lease on this stream and has no answer yet was sent.
    lease_end: Optional[float] = None
    lease_timer: Optional[asyncio.TimerHandle] = None
    heartbeat_at: Optional[float] = None
    progress: ProgressThrottle = field(default_factory=ProgressThrottle)
    progress_timer: Optional[asyncio.TimerHandle] = None

    @property
    def ref(self) -> pb.LeaseRef:
        return pb.LeaseRef(job_id=self.ctx.id, lease_token=self.ctx.lease_token)


@dataclass
class _Session:
    """One stream: from Hello to its end."""

    call: Any
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    heartbeat_interval: float = 10.0
    drain_requested: bool = False
    closing: bool = False
    aborted: bool = False  # we cancelled the call ourselves


class Worker:
    """Runs handlers for jobs pushed by a Jobwire broker.

    Usage::

        worker = Worker("127.0.0.1:7070", capacity=4)

        @worker.handler("email.send")
        def send(ctx):
            data = ctx.json()
            ...

        worker.run_sync()  # returns after SIGTERM/SIGINT and a graceful drain

    A handler returns normally on success, and what it returns (or gave ctx.set_result) is the
    job's result; it raises on failure, see jobwire.errors for how exceptions map to FATAL and
    TRANSIENT failures. ctx.progress() reports how far it got.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:7070",
        *,
        worker_id: Optional[str] = None,
        capacity: int = 8,
        queues: tuple[str, ...] = (),
        grace_period: float = 30.0,
        finish_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        resend_delay: float = 0.5,
        backoff: Optional[Backoff] = None,
        channel_factory: Optional[Callable[[str], grpc.aio.Channel]] = None,
        token: Optional[str] = None,
        tls: bool = False,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_server_name: Optional[str] = None,
        rand: Callable[[], float] = random.random,
        movable: bool = False,
    ):
        """Configure a worker.

        grace_period: after shutdown(), how long running jobs may take before they are cancelled.
        finish_timeout: after the grace period, how long to wait for their results to be stored.
        resend_delay: base wait before re-sending a message the broker refused as UNAVAILABLE.
        token: API token for a broker with auth on, sent as "authorization: Bearer <token>".
        tls, tls_ca, tls_cert, tls_key: connect over TLS (implied by any of the files), trusting
            the CA certificates in the PEM file tls_ca (default: the system's), and presenting
            the client certificate tls_cert with its key tls_key to a broker that requires one.
            The files are read here, so a missing one fails at once.
        tls_server_name: the name to check the broker's certificate against, when the address is
            not one the certificate holds (implies TLS).
        movable: the address reaches several brokers of one database (a load balancer, or a
            DNS name of several), so that a new stream may land on another broker: brokers then
            even out their workers by ending a movable worker's stream (UNAVAILABLE), and it
            reconnects. Leave it False for an address of one broker.
        """
        if not 1 <= capacity <= 10000:
            raise ValueError("capacity must be in 1..10000")
        self.address = address
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        if not 1 <= len(self.worker_id) <= 255:
            raise ValueError("worker_id must be 1..255 characters")
        self.capacity = capacity
        self.queues = tuple(queues)
        self.movable = movable
        self.grace_period = grace_period
        self.finish_timeout = finish_timeout
        self.connect_timeout = connect_timeout
        self.resend_delay = resend_delay
        self._backoff = backoff or Backoff()
        if token is not None and (not token or any(c.isspace() for c in token)):
            raise ValueError("token must be non-empty and hold no white space")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        # Whether the channel is TLS (None: a channel_factory of the caller's) and presents a
        # client certificate, to word a failed connection (jobwire.connect).
        self._tls: Optional[bool] = None
        self._client_cert = tls_cert is not None
        if channel_factory is None:
            creds = tls_credentials(tls or tls_server_name is not None, tls_ca, tls_cert, tls_key)
            self._tls = creds is not None
            if creds is not None:
                options = CHANNEL_OPTIONS
                if tls_server_name:
                    options += (("grpc.ssl_target_name_override", tls_server_name),)
                channel_factory = lambda addr: grpc.aio.secure_channel(  # noqa: E731
                    addr, creds, options=options
                )
            else:
                channel_factory = lambda addr: grpc.aio.insecure_channel(  # noqa: E731
                    addr, options=CHANNEL_OPTIONS
                )
        self._channel_factory = channel_factory
        self._rand = rand
        self._handlers: Dict[str, Handler] = {}
        self._async_handlers: set[str] = set()  # job types whose handler is an async def
        self._jobs: Dict[int, _Job] = {}
        self._releases: Dict[int, pb.Release] = {}
        self._session: Optional[_Session] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._shutting_down = False
        self._hard_stopped = False
        self._wake: Optional[asyncio.Event] = None
        self._timers: list[asyncio.TimerHandle] = []
        # How long a lease lasts on this worker's clock: the Welcome's lease_duration less
        # lease_margin(). Zero (no lease duration announced) leaves leases to the broker.
        self._lease_allowance = 0.0
        self._welcomed = False  # the current stream got its Welcome
        # The largest result the broker stores (Welcome.max_result_bytes); 0: it did not say.
        self._max_result_bytes = 0
        # The least time between two progress reports of a job, and the clock they are timed
        # by: loop.time()'s, readable from a handler's thread too.
        self._progress_interval = PROGRESS_INTERVAL
        self._clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **kwargs: Any) -> "Worker":
        """A worker for the broker the environment names: JOBWIRE_ADDR, JOBWIRE_TOKEN,
        JOBWIRE_TLS, JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY and
        JOBWIRE_TLS_SERVER_NAME (docs/security.md). kwargs are the other options, and win."""
        return cls(**{**settings_from_env(environ), **kwargs})

    # ---- registration -------------------------------------------------------------------

    def handler(self, job_type: str) -> Callable[[Handler], Handler]:
        """Decorator: register the decorated function as the handler of job_type."""

        def register(fn: Handler) -> Handler:
            self.register(job_type, fn)
            return fn

        return register

    def register(self, job_type: str, fn: Handler) -> None:
        """Register fn (sync or async, taking a JobContext) as the handler of job_type."""
        if not job_type:
            raise ValueError("job_type must not be empty")
        if job_type in self._handlers:
            raise ValueError(f"a handler for {job_type!r} is already registered")
        self._handlers[job_type] = fn
        if inspect.iscoroutinefunction(fn):
            self._async_handlers.add(job_type)

    # ---- running ------------------------------------------------------------------------

    def run_sync(self, install_signal_handlers: bool = True) -> None:
        """Run until shut down; SIGTERM and SIGINT start a graceful shutdown."""

        async def main() -> None:
            if install_signal_handlers:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._begin_shutdown, sig.name)
            await self.run()

        asyncio.run(main())

    def shutdown(self) -> None:
        """Start a graceful shutdown. Safe to call from any thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_shutdown, "shutdown()")

    async def run(self) -> None:
        """Connect, take work and reconnect on errors, until a graceful shutdown completes.

        Raises grpc.aio.AioRpcError when the broker rejects the worker for a reason no
        reconnect can fix (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, UNIMPLEMENTED),
        and jobwire.ConnectError (an AioRpcError whose details say what to fix) when the token is
        refused or the TLS settings do not match the broker's: a failed handshake, TLS on one side
        only, or a missing client certificate. A broker that is down or restarting is waited for.
        """
        if not self._handlers:
            raise ValueError("register at least one handler before run()")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        channel = self._channel_factory(self.address)
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)
        try:
            while not self._done():
                try:
                    await self._run_session(stub)
                    log.info("stream to %s closed", self.address)
                except grpc.aio.AioRpcError as e:
                    if not self._welcomed:
                        ce = await asyncio.get_running_loop().run_in_executor(
                            None, classify_connect_error, e, self.address, self._tls, self._client_cert
                        )
                        if ce is not None:
                            log.error("cannot connect to the broker at %s: %s", self.address, ce)
                            raise ce from e
                    if e.code() in _PERMANENT_CODES:
                        log.error("broker rejected worker: %s %s", e.code().name, e.details())
                        raise
                    log.warning("stream error: %s %s", e.code().name, e.details())
                except (ProtocolError, asyncio.TimeoutError, OSError) as e:
                    log.warning("stream failed: %s", e or type(e).__name__)
                if self._done():
                    break
                delay = self._backoff.next_delay()
                log.info("reconnecting in %.2fs", delay)
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._hard_stopped = True
            for t in self._timers:
                t.cancel()
            for j in list(self._jobs.values()):
                self._stop_lease(j)
                if j.task is not None:
                    j.task.cancel()
            await channel.close()
            self._loop = None

    def _done(self) -> bool:
        """Whether run() may return: shutting down with nothing left to report, or out of time."""
        return self._hard_stopped or (self._shutting_down and not self._jobs)

    # ---- one stream ---------------------------------------------------------------------

    async def _run_session(self, stub: worker_service_pb2_grpc.WorkerServiceStub) -> None:
        self._welcomed = False
        call = stub.Connect(metadata=self._metadata)
        sess = _Session(call=call)
        tasks: list[asyncio.Task] = []
        try:
            held = [j.ref for j in self._jobs.values()]
            await call.write(
                pb.ConnectRequest(
                    hello=pb.Hello(
                        worker_id=self.worker_id,
                        job_types=sorted(self._handlers),
                        queues=list(self.queues),
                        capacity=self.capacity,
                        held=held,
                        movable=self.movable,
                        accepts_batches=True,
                    )
                )
            )
            first = await asyncio.wait_for(call.read(), self.connect_timeout)
            if first is grpc.aio.EOF:
                raise ProtocolError("stream closed before Welcome")
            if first.WhichOneof("message") != "welcome":
                raise ProtocolError(f"expected Welcome, got {first.WhichOneof('message')}")
            self._welcomed = True
            self._on_welcome(sess, first.welcome)
            self._backoff.reset()
            self._session = sess
            tasks.append(asyncio.create_task(self._write_loop(sess)))
            tasks.append(asyncio.create_task(self._heartbeat_loop(sess)))
            if self._shutting_down:
                self._send(pb.ConnectRequest(drain=pb.Drain()))
            for j in self._jobs.values():
                if j.result is not None:
                    self._send(pb.ConnectRequest(result=j.result))
                else:
                    # Started again: the old stream may have ended before the broker read it,
                    # and then the adopted lease is not started there. A broker that has it
                    # already ignores it.
                    self._send(pb.ConnectRequest(started=pb.Started(job_id=j.ref.job_id, lease_token=j.ref.lease_token)))
            self._maybe_close()
            while True:
                try:
                    resp = await call.read()
                except asyncio.CancelledError:
                    if sess.aborted:
                        return
                    raise
                if resp is grpc.aio.EOF:
                    return
                if resp.HasField("batch"):
                    for inner in resp.batch.messages:
                        self._on_message(sess, inner)
                else:
                    self._on_message(sess, resp)
        finally:
            self._session = None
            for t in tasks:
                t.cancel()
            # Never-started jobs go back to PENDING when the stream ends; only the broker may
            # re-assign them. All jobs here have started, so only pending releases are forgotten.
            self._releases.clear()
            call.cancel()

    def _on_welcome(self, sess: _Session, w: pb.Welcome) -> None:
        lease = w.lease_duration.ToNanoseconds() / 1e9
        interval = w.heartbeat_interval.ToNanoseconds() / 1e9
        if interval <= 0:
            interval = lease / 3 if lease > 0 else 10.0
        sess.heartbeat_interval = interval
        self._max_result_bytes = w.max_result_bytes
        self._lease_allowance = lease - lease_margin(lease, interval) if lease > 0 else 0.0
        # Heartbeats of the old stream are never answered; adopted leases keep their deadlines.
        for j in self._jobs.values():
            j.heartbeat_at = None
        log.info(
            "connected to %s as %s (session %s, lease %.1fs, heartbeat %.1fs, holding %d)",
            self.address, self.worker_id, w.session_id, lease, interval, len(self._jobs),
        )
        for ref in w.lost:
            j = self._jobs.get(ref.job_id)
            if j is not None and j.ctx.lease_token == ref.lease_token:
                log.warning("lease of job %d lost while disconnected", ref.job_id)
                self._drop(j, CANCEL_LEASE_LOST)

    async def _write_loop(self, sess: _Session) -> None:
        """Write what is queued, in order. Messages queued at the same moment (the Started of
        each assignment of one batch, the results of handlers that finished together) go as one
        batch frame: each gRPC write costs about as much CPU as a whole no-op job, so a batch of
        n saves n-1 of them. A message queued alone is written alone at once: nothing waits
        for company."""
        queue, call = sess.queue, sess.call
        held = None  # taken from the queue but not fit for the last frame
        try:
            while True:
                if held is not None:
                    msg, held = held, None
                else:
                    # What was queued meanwhile is taken without waiting on the queue again.
                    msg = queue.get_nowait() if queue.qsize() else await queue.get()
                if msg is _CLOSE:
                    await call.done_writing()
                    return
                if queue.qsize() and _batchable(msg):
                    batch, size = [msg], msg.ByteSize()
                    while queue.qsize() and len(batch) < MAX_BATCH:
                        nxt = queue.get_nowait()
                        if not _batchable(nxt):
                            held = nxt
                            break
                        size += nxt.ByteSize()
                        if size > MAX_BATCH_BYTES:
                            held = nxt
                            break
                        batch.append(nxt)
                    if len(batch) > 1:
                        msg = pb.ConnectRequest(batch=pb.ConnectRequestBatch(messages=batch))
                await call.write(msg)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the stream broke: make the reader see it too
            log.debug("write failed: %s", e)
            sess.aborted = True
            sess.call.cancel()

    async def _heartbeat_loop(self, sess: _Session) -> None:
        while True:
            await asyncio.sleep(sess.heartbeat_interval)
            # Heartbeat every held lease, including ones whose result is not yet stored: the
            # lease must outlive a broker that is slow to store the result.
            leases = [j.ref for j in self._jobs.values()]
            if leases:
                now = self._loop.time()
                for j in self._jobs.values():
                    if j.heartbeat_at is None:
                        j.heartbeat_at = now
                self._send(pb.ConnectRequest(heartbeat=pb.Heartbeat(leases=leases)))

    def _send(self, msg: pb.ConnectRequest) -> None:
        """Queue msg on the current stream; without one, it is dropped (results are re-sent)."""
        sess = self._session
        if sess is not None and not sess.closing:
            sess.queue.put_nowait(msg)

    def _maybe_close(self) -> None:
        """Half-close the stream once draining and nothing is held any more."""
        sess = self._session
        if sess is None or sess.closing:
            return
        if (self._shutting_down or sess.drain_requested) and not self._jobs:
            sess.closing = True
            sess.queue.put_nowait(_CLOSE)

            def abort() -> None:  # the broker did not close its side in time
                if not sess.call.done():
                    sess.aborted = True
                    sess.call.cancel()

            self._timers.append(self._loop.call_later(self.finish_timeout, abort))

    # ---- broker messages ----------------------------------------------------------------

    def _on_message(self, sess: _Session, resp: pb.ConnectResponse) -> None:
        kind = resp.WhichOneof("message")
        if kind == "assignment":
            self._on_assignment(resp.assignment)
        elif kind == "result_ack":
            self._on_result_ack(resp.result_ack)
        elif kind == "refused":
            self._on_refused(resp.refused)
        elif kind == "cancel":
            c = resp.cancel
            j = self._jobs.get(c.job_id)
            if j is not None and j.ctx.lease_token == c.lease_token:
                reason = _CANCEL_REASONS.get(c.reason, CANCEL_REQUESTED)
                log.info("job %d cancelled by broker (%s)", c.job_id, reason)
                self._drop(j, reason)
        elif kind == "drain":
            log.info("broker asked to drain: %s", resp.drain.reason)
            sess.drain_requested = True
            self._maybe_close()
        elif kind == "heartbeat_ack":
            self._on_extended(resp.heartbeat_ack.extended)
        else:
            log.warning("unexpected message %s", kind)

    def _on_assignment(self, a: pb.Assignment) -> None:
        job_id = a.job.id
        old = self._jobs.get(job_id)
        if old is not None:
            if old.ctx.lease_token == a.lease_token:
                return  # a duplicate of what we run
            # A newer lease on the same job: ours is stale, so its outcome must not be reported.
            self._drop(old, CANCEL_LEASE_LOST)
        sess = self._session
        draining = self._shutting_down or (sess is not None and sess.drain_requested)
        fn = self._handlers.get(a.job.type)
        reason = ""
        if draining:
            reason = "worker is draining"
        elif fn is None:
            reason = f"no handler for job type {a.job.type!r}"
        elif len(self._jobs) >= self.capacity:
            reason = "worker is at capacity"
        if reason:
            self._release(pb.Release(job_id=job_id, lease_token=a.lease_token, reason=reason))
            return
        j = _Job(ctx=JobContext(a), progress=ProgressThrottle(self._progress_interval))
        j.ctx._progress_sink = lambda fraction, message: self._offer_progress(j, fraction, message)
        self._jobs[job_id] = j
        # Started must reach the broker before user code runs: the attempt counts from here.
        self._send(pb.ConnectRequest(started=pb.Started(job_id=job_id, lease_token=a.lease_token)))
        log.info("job %d (%s) attempt %d started", job_id, a.job.type, a.attempt)
        self._arm_lease(j, self._loop.time())
        if j.ctx.attempt_timeout:
            j.attempt_timer = self._loop.call_later(j.ctx.attempt_timeout, self._attempt_timed_out, j)
        j.task = asyncio.create_task(self._execute(j, fn, a.job.type in self._async_handlers))

    def _attempt_timed_out(self, j: _Job) -> None:
        """Stop a handler that outlived its attempt timeout; its outcome is reported as a timeout."""
        if self._jobs.get(j.ctx.id) is not j or j.result is not None:
            return
        log.warning("job %d outlived its attempt timeout of %gs: cancelling it", j.ctx.id, j.ctx.attempt_timeout)
        j.timed_out = True
        j.ctx._cancel(CANCEL_TIMEOUT)

    def _arm_lease(self, j: _Job, start: float) -> None:
        """(Re)start j's lease deadline: start (loop time) plus the lease allowance."""
        self._stop_lease(j)
        if self._lease_allowance <= 0:
            return
        j.lease_end = start + self._lease_allowance
        j.lease_timer = self._loop.call_at(j.lease_end, self._lease_ran_out, j)

    @staticmethod
    def _stop_lease(j: _Job) -> None:
        if j.lease_timer is not None:
            j.lease_timer.cancel()
            j.lease_timer = None

    def _lease_ran_out(self, j: _Job) -> None:
        """Give up a job whose lease passed on this worker's clock without an extension: the
        broker (frozen or cut off) may already run its next attempt elsewhere."""
        if self._jobs.get(j.ctx.id) is not j or j.result is not None:
            return
        log.warning("job %d: lease ran out without an extension from the broker; cancelling it", j.ctx.id)
        self._drop(j, CANCEL_LEASE_LOST)

    def _on_extended(self, extended) -> None:
        """Move the deadline of every lease a HeartbeatAck lists as extended."""
        now = self._loop.time()
        for ref in extended:
            j = self._jobs.get(ref.job_id)
            if j is None or j.ctx.lease_token != ref.lease_token:
                continue
            start = now if j.heartbeat_at is None else min(j.heartbeat_at, now)
            j.heartbeat_at = None
            if j.result is None:
                self._arm_lease(j, start)

    def _on_result_ack(self, ack: pb.ResultAck) -> None:
        j = self._jobs.get(ack.job_id)
        if j is None or j.ctx.lease_token != ack.lease_token:
            return
        del self._jobs[ack.job_id]
        if log.isEnabledFor(logging.INFO):
            log.info("job %d result stored: %s", ack.job_id, pb.Decision.Name(ack.decision))
        self._after_free()

    def _on_refused(self, r: pb.Refused) -> None:
        j = self._jobs.get(r.job_id)
        if j is not None and j.ctx.lease_token != r.lease_token:
            j = None
        what = r.refused_message
        if what == pb.REFUSED_MESSAGE_RELEASE:
            rel = self._releases.get(r.job_id)
            if rel is not None and rel.lease_token == r.lease_token:
                if r.code == CODE_UNAVAILABLE:
                    self._later(lambda: self._resend_release(rel))
                else:
                    del self._releases[r.job_id]
            return
        if j is None:
            return
        if r.code == CODE_UNAVAILABLE:
            if what == pb.REFUSED_MESSAGE_RESULT:
                self._later(lambda: self._resend_result(j))
            elif what == pb.REFUSED_MESSAGE_STARTED:
                started = pb.Started(job_id=r.job_id, lease_token=r.lease_token)
                self._later(lambda: self._resend_if_held(j, pb.ConnectRequest(started=started)))
            return  # a refused heartbeat is repeated by the next tick anyway
        if what == pb.REFUSED_MESSAGE_PROGRESS and r.code == CODE_INVALID_ARGUMENT:
            log.warning("broker refused a progress report of job %d: %s", r.job_id, r.message)
            return  # progress is advisory: the job goes on
        if what in (pb.REFUSED_MESSAGE_HEARTBEAT, pb.REFUSED_MESSAGE_PROGRESS) and j.result is not None:
            return  # the Result's own answer settles this job
        log.warning(
            "broker refused %s for job %d (code %d: %s); dropping the job",
            pb.RefusedMessage.Name(what), r.job_id, r.code, r.message,
        )
        self._drop(j, CANCEL_LEASE_LOST)

    # ---- helpers ------------------------------------------------------------------------

    def _drop(self, j: _Job, reason: str) -> None:
        """Forget j: the broker has settled it. Its handler is told to stop; its outcome is discarded."""
        if self._jobs.get(j.ctx.id) is j:
            del self._jobs[j.ctx.id]
        self._stop_lease(j)
        self._stop_progress(j)
        j.ctx._cancel(reason)
        self._after_free()

    # ---- progress -------------------------------------------------------------------------

    def _offer_progress(self, j: _Job, fraction: Optional[float], message: str) -> None:
        """Take a report from the handler (any thread): the throttle decides there, and only
        what is to be sent or scheduled crosses to the loop, at most twice a second."""
        p = pb.Progress(job_id=j.ctx.id, lease_token=j.ctx.lease_token, fraction=fraction, message=message)
        send, at = j.progress.offer(self._clock(), p)
        if send is None and at is None:
            return
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._progress_out, j, send, at)
        except RuntimeError:
            pass  # the loop is gone: the worker stopped

    def _progress_out(self, j: _Job, send: Optional[pb.Progress], at: Optional[float]) -> None:
        if self._jobs.get(j.ctx.id) is not j or j.result is not None:
            return
        if send is not None:
            self._send(pb.ConnectRequest(progress=send))
        if at is not None:
            delay = max(at - self._clock(), 0.0)
            j.progress_timer = self._loop.call_later(delay, self._progress_due, j)

    def _progress_due(self, j: _Job) -> None:
        """Send the report j's throttle held back, unless the throttle was closed meanwhile."""
        j.progress_timer = None
        p = j.progress.due(self._clock())
        if p is not None:
            self._send(pb.ConnectRequest(progress=p))

    @staticmethod
    def _stop_progress(j: _Job) -> Optional[pb.Progress]:
        """No progress for j from now on: its result goes next, or it is gone. Returns the report
        held back, which goes right before the result."""
        if j.progress_timer is not None:
            j.progress_timer.cancel()
            j.progress_timer = None
        return j.progress.close()

    def _after_free(self) -> None:
        self._maybe_close()
        if self._done() and self._wake is not None:
            self._wake.set()

    def _release(self, rel: pb.Release) -> None:
        log.info("releasing job %d: %s", rel.job_id, rel.reason)
        self._releases[rel.job_id] = rel
        self._send(pb.ConnectRequest(release=rel))

    def _resend_release(self, rel: pb.Release) -> None:
        if self._releases.get(rel.job_id) is rel:
            self._send(pb.ConnectRequest(release=rel))

    def _resend_result(self, j: _Job) -> None:
        if self._jobs.get(j.ctx.id) is j and j.result is not None:
            self._send(pb.ConnectRequest(result=j.result))

    def _resend_if_held(self, j: _Job, msg: pb.ConnectRequest) -> None:
        if self._jobs.get(j.ctx.id) is j:
            self._send(msg)

    def _later(self, fn: Callable[[], None]) -> None:
        """Run fn after resend_delay with jitter, so a busy broker is not hammered in lockstep."""
        delay = self.resend_delay * (1 + self._rand())
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(self._loop.call_later(delay, fn))

    async def _execute(self, j: _Job, fn: Handler, is_async: bool) -> None:
        ctx = j.ctx
        # The message is built around the result, so that sending it copies nothing.
        msg = pb.ConnectRequest()
        result = msg.result
        result.job_id = ctx.id
        result.lease_token = ctx.lease_token
        try:
            if is_async:
                value = await fn(ctx)
            else:
                value = await self._in_thread(fn, ctx)
            data = encode_result(value) if value is not None else ctx._result
            limit = self._max_result_bytes
            if data and limit > 0 and len(data) > limit:
                result.failure.CopyFrom(result_too_large(ctx.id, len(data), limit))
                log.info("job %d failed (FAILURE_KIND_FATAL): %s", ctx.id, result.failure.message)
            else:
                result.success.SetInParent()
                if data:
                    result.success.result = data
        except BaseException as e:  # noqa: BLE001 - every handler outcome must be reported
            if isinstance(e, asyncio.CancelledError) and self._hard_stopped:
                raise
            if j.shutdown_cancelled and isinstance(e, (JobCancelled, asyncio.CancelledError)):
                result.failure.CopyFrom(
                    pb.Failure(
                        kind=job_pb2.FAILURE_KIND_TRANSIENT,
                        error_type="WorkerShutdown",
                        message="the worker shut down before the job finished",
                    )
                )
            elif j.timed_out:
                # The attempt timeout stopped it: a timeout, whatever the handler made of that.
                c = classify(e)
                result.failure.CopyFrom(
                    pb.Failure(
                        kind=job_pb2.FAILURE_KIND_TRANSIENT,
                        error_type=c.error_type,
                        message=c.message or f"attempt timeout of {ctx.attempt_timeout:g}s exceeded",
                        details=c.details,
                        timed_out=True,
                    )
                )
            else:
                c = classify(e)
                result.failure.CopyFrom(to_failure(c))
                log.info(
                    "job %d failed (%s): %s: %s",
                    ctx.id, job_pb2.FailureKind.Name(c.kind), c.error_type, c.message,
                )
        finally:
            if j.attempt_timer is not None:
                j.attempt_timer.cancel()
        self._stop_lease(j)  # the result is sent whatever becomes of the lease now
        last = self._stop_progress(j)  # nothing after the result; what was held back goes before it
        if self._jobs.get(ctx.id) is not j:
            return  # cancelled or lost meanwhile: the broker refuses results for this lease
        if last is not None:
            self._send(pb.ConnectRequest(progress=last))
        j.result = result
        self._send(msg)

    def _in_thread(self, fn: Callable[[JobContext], Any], ctx: JobContext) -> "asyncio.Future[Any]":
        """Run a sync handler in its own daemon thread, so a stuck handler never blocks shutdown."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def settle(value: Any, exc: Optional[BaseException]) -> None:
            if fut.done():
                return
            if exc is None:
                fut.set_result(value)
            else:
                fut.set_exception(exc)

        def target() -> None:
            value: Any = None
            exc: Optional[BaseException] = None
            try:
                value = fn(ctx)
            except BaseException as e:  # noqa: BLE001 - handed to the loop
                exc = e
            try:
                loop.call_soon_threadsafe(settle, value, exc)
            except RuntimeError:
                pass  # the loop is gone: the worker stopped

        threading.Thread(target=target, name=f"jobwire-job-{ctx.id}", daemon=True).start()
        return fut

    def _begin_shutdown(self, why: str = "") -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
        log.info(
            "shutting down (%s): draining, %d job(s) running, grace %.1fs",
            why, len(self._jobs), self.grace_period,
        )
        self._send(pb.ConnectRequest(drain=pb.Drain()))
        loop = self._loop
        if loop is None:
            return
        self._timers.append(loop.call_later(self.grace_period, self._grace_over))
        self._timers.append(loop.call_later(self.grace_period + self.finish_timeout, self._hard_stop))
        self._after_free()
        if self._wake is not None and self._done():
            self._wake.set()

    def _grace_over(self) -> None:
        for j in list(self._jobs.values()):
            if j.result is None:
                log.warning("grace period over: cancelling job %d", j.ctx.id)
                j.shutdown_cancelled = True
                j.ctx._cancel(CANCEL_SHUTDOWN)

    def _hard_stop(self) -> None:
        if self._jobs:
            log.error("giving up on %d unreported job(s)", len(self._jobs))
        self._hard_stopped = True
        if self._wake is not None:
            self._wake.set()
        sess = self._session
        if sess is not None:
            sess.aborted = True
            sess.call.cancel()
