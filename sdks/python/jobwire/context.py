"""JobContext: what a handler gets to know about the job it runs, and how it learns of a cancel."""

from __future__ import annotations

import asyncio
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
        #: What the producer attached to the job: its own keys, and the W3C trace context of
        #: the enqueue under "traceparent" and "tracestate" (see ``traceparent``).
        self.metadata: Dict[str, str] = dict(job.metadata)
        self.cancel_reason: Optional[str] = None
        self._event = threading.Event()
        self._async_event = asyncio.Event()

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
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise JobCancelled if the job was cancelled."""
        if self._event.is_set():
            raise JobCancelled(f"job {self.id} cancelled: {self.cancel_reason}")

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Block until the job is cancelled or timeout passes; return whether it was cancelled."""
        return self._event.wait(timeout)

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early and raising JobCancelled if the job is cancelled."""
        if self._event.wait(seconds):
            self.raise_if_cancelled()

    async def wait_cancelled_async(self, timeout: Optional[float] = None) -> bool:
        """Wait until the job is cancelled or timeout passes; return whether it was cancelled."""
        try:
            await asyncio.wait_for(self._async_event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def sleep_async(self, seconds: float) -> None:
        """Sleep, waking early and raising JobCancelled if the job is cancelled."""
        if await self.wait_cancelled_async(seconds):
            self.raise_if_cancelled()

    def _cancel(self, reason: str) -> None:
        """Signal cancellation; called on the worker's event loop."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self._event.set()
        self._async_event.set()
