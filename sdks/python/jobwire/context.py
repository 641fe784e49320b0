"""JobContext: what a handler gets to know about the job it runs, and how it learns of a cancel."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from jobwire.errors import JobCancelled
from jobwire.progress import check_fraction, clip_message
from jobwire.v1 import job_pb2, worker_service_pb2

#: Why a job was cancelled, as found in JobContext.cancel_reason.
CANCEL_REQUESTED = "requested"  # someone called CancelJob
CANCEL_TIMEOUT = "timeout"  # the attempt outlived its attempt timeout
# the broker no longer considers this worker the lease holder, or the lease ran out on this
# worker's clock without an extension
CANCEL_LEASE_LOST = "lease_lost"
CANCEL_SHUTDOWN = "shutdown"  # this worker is shutting down and its grace period ran out



@dataclass(frozen=True)
class ParentResult:
    """The result of a job this one depends on, as the assignment carries it."""

    job_id: int
    type: str
    result: bytes  # what the parent's handler returned; empty if nothing
    state: str  # "succeeded", or "dead" or "cancelled" for a job enqueued to run anyway

    def json(self) -> Any:
        """Decode the parent's result as JSON. A malformed one raises json.JSONDecodeError (FATAL)."""
        return json.loads(self.result.decode("utf-8"))


def _state_name(state: int) -> str:
    name = job_pb2.JobState.Name(state) if state in job_pb2.JobState.values() else f"JOB_STATE_{state}"
    return name.removeprefix("JOB_STATE_").lower()


def encode_result(value: Any) -> Optional[bytes]:
    """A handler's result as the bytes to send: bytes as they are, str as UTF-8, None as no
    result, anything else as JSON (a value JSON cannot hold raises TypeError: FATAL)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


# Guards the making of a JobContext's threading.Event, which happens on the first wait (in the
# handler's thread), against a cancel (on the worker's loop): one of them sees the other.
_EVENT_LOCK = threading.Lock()


class JobContext:
    """The job a handler runs, and a cancellation signal.

    Cancellation is cooperative: the library never kills a handler. Sync handlers (run in their own
    thread) poll ``cancelled``, or wait with ``wait_cancelled()`` / ``sleep()``; async handlers use
    ``await wait_cancelled_async()`` / ``await sleep_async()``. After a cancel from the broker the
    job's outcome is already recorded there, so whatever the handler returns or raises is dropped.
    """

    def __init__(self, assignment: worker_service_pb2.Assignment):
        job = assignment.job
        self._assignment = assignment
        self.job = job
        self.id: int = job.id
        self.type: str = job.type
        self.queue: str = job.queue
        self.payload: bytes = bytes(job.payload)
        self.attempt: int = assignment.attempt
        self.max_attempts: int = job.max_attempts
        self.lease_token: str = assignment.lease_token
        self.attempt_timeout: Optional[float] = (
            assignment.attempt_timeout.ToNanoseconds() / 1e9
            if assignment.HasField("attempt_timeout")
            else None
        )
        self.cancel_reason: Optional[str] = None
        self._result: Optional[bytes] = None
        # Set by the worker: takes a validated (fraction, message) from any thread.
        self._progress_sink: Optional[Callable[[Optional[float], str], None]] = None
        # Made on the first wait: most handlers never wait, and a worker draining thousands of
        # jobs a second would otherwise make two events (a lock and a condition) for each.
        self._event: Optional[threading.Event] = None
        self._async_event: Optional[asyncio.Event] = None

    @functools.cached_property
    def metadata(self) -> Dict[str, str]:
        """What the producer attached to the job: its own keys, and the W3C trace context of the
        enqueue under "traceparent" and "tracestate" (see ``traceparent``)."""
        return dict(self.job.metadata)

    @property
    def traceparent(self) -> Optional[str]:
        """The producer's W3C traceparent header, to continue its trace (e.g. with OpenTelemetry's
        TraceContextTextMapPropagator().extract(ctx.metadata)); None when the job carries none."""
        return self.metadata.get("traceparent")

    def json(self) -> Any:
        """Decode the payload as JSON. A malformed payload raises json.JSONDecodeError (FATAL)."""
        return json.loads(self.payload.decode("utf-8"))

    @functools.cached_property
    def parent_results(self) -> List[ParentResult]:
        """The results of the jobs this one depends on, in the order the producer named them;
        empty for a job without parents."""
        return [
            ParentResult(job_id=p.job_id, type=p.type, result=bytes(p.result), state=_state_name(p.state))
            for p in self._assignment.parent_results
        ]

    def set_result(self, value: Any) -> None:
        """Set the job's result, sent with its success: bytes as they are, str as UTF-8, anything
        else as JSON. A handler may instead return it; a returned value other than None wins.
        A result larger than the broker's limit (Welcome.max_result_bytes) fails the attempt as
        FATAL, error type ResultTooLarge."""
        self._result = encode_result(value)

    def progress(self, fraction: Optional[float] = None, message: str = "") -> None:
        """Report how far the job got: fraction from 0 to 1 (None when unknown) and/or a short
        message (cut to 256 bytes of UTF-8). Call it as often as you like, from the handler's
        thread or loop: the worker sends at most one report per second, the last one always,
        and none after the job's result."""
        f = check_fraction(fraction)
        sink = self._progress_sink
        if sink is not None:
            sink(f, clip_message(message))

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled; cancel_reason says why."""
        return self.cancel_reason is not None

    def raise_if_cancelled(self) -> None:
        """Raise JobCancelled if the job was cancelled."""
        if self.cancel_reason is not None:
            raise JobCancelled(f"job {self.id} cancelled: {self.cancel_reason}")

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Block until the job is cancelled or timeout passes; return whether it was cancelled."""
        return self._thread_event().wait(timeout)

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early and raising JobCancelled if the job is cancelled."""
        if self._thread_event().wait(seconds):
            self.raise_if_cancelled()

    async def wait_cancelled_async(self, timeout: Optional[float] = None) -> bool:
        """Wait until the job is cancelled or timeout passes; return whether it was cancelled."""
        if self.cancel_reason is not None:
            return True  # at once, even with a timeout of 0
        if self._async_event is None:  # made on the loop, where _cancel runs: no lock needed
            self._async_event = asyncio.Event()
        try:
            await asyncio.wait_for(self._async_event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def sleep_async(self, seconds: float) -> None:
        """Sleep, waking early and raising JobCancelled if the job is cancelled."""
        if await self.wait_cancelled_async(seconds):
            self.raise_if_cancelled()

    def _thread_event(self) -> threading.Event:
        ev = self._event
        if ev is None:
            with _EVENT_LOCK:
                if self._event is None:
                    self._event = threading.Event()
                    if self.cancel_reason is not None:
                        self._event.set()
                ev = self._event
        return ev

    def _cancel(self, reason: str) -> None:
        """Signal cancellation; called on the worker's event loop."""
        with _EVENT_LOCK:
            if self.cancel_reason is None:
                self.cancel_reason = reason
            ev = self._event
        if ev is not None:
            ev.set()
        if self._async_event is not None:
            self._async_event.set()
