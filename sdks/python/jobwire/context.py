"""JobContext: what a handler gets to know about the job it runs, and how it learns of a cancel."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from typing import Any, Dict, Optional

from jobwire.errors import JobCancelled
from jobwire.v1 import worker_service_pb2

#: Why a job was cancelled, as found in JobContext.cancel_reason.
CANCEL_REQUESTED = "requested"  # someone called CancelJob
CANCEL_TIMEOUT = "timeout"  # the attempt outlived its attempt timeout
# the broker no longer considers this worker the lease holder, or the lease ran out on this
# worker's clock without an extension
CANCEL_LEASE_LOST = "lease_lost"
CANCEL_SHUTDOWN = "shutdown"  # this worker is shutting down and its grace period ran out

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
