"""Failure classification: turning a handler's exception into the protocol's Failure.

The broker decides retries, but only the worker knows whether an error is a code or payload bug
(FATAL: the job goes to the dead-letter queue at once) or a passing condition (TRANSIENT: retried
with backoff). Retrying a bug only burns attempts, so the common "bug" exception types are FATAL.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Optional

from jobwire.v1 import job_pb2, worker_service_pb2

#: Exception types that mean a bug in the handler or its payload. Subclasses count too
#: (json.JSONDecodeError and UnicodeDecodeError are ValueErrors).
FATAL_EXCEPTION_TYPES: tuple[type[BaseException], ...] = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    json.JSONDecodeError,
    NotImplementedError,
)


class FatalError(Exception):
    """Raise to send the job to the dead-letter queue without further retries."""


class RetryAfter(Exception):
    """Raise to fail transiently and ask the broker to retry after ``seconds``.

    The broker uses this instead of its computed backoff, still capped by its maximum delay.
    """

    def __init__(self, seconds: float, message: str = ""):
        if seconds < 0:
            raise ValueError("RetryAfter: seconds must not be negative")
        self.seconds = float(seconds)
        super().__init__(message or f"retry after {self.seconds:g}s")


class JobCancelled(Exception):
    """Raised by JobContext helpers once the job was cancelled.

    After a cancel from the broker no result is sent, so raising it is only a way to unwind.
    """


@dataclass(frozen=True)
class Classified:
    """The fields of a protocol Failure, before they are put on the wire."""

    kind: int  # a job_pb2.FailureKind value
    error_type: str
    message: str
    details: str
    retry_after: Optional[float] = None  # seconds


def classify(exc: BaseException) -> Classified:
    """Classify exc as FATAL or TRANSIENT and describe it for the broker."""
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    error_type = type(exc).__name__
    message = str(exc)
    if isinstance(exc, RetryAfter):
        return Classified(job_pb2.FAILURE_KIND_TRANSIENT, error_type, message, details, exc.seconds)
    if isinstance(exc, (FatalError,) + FATAL_EXCEPTION_TYPES):
        return Classified(job_pb2.FAILURE_KIND_FATAL, error_type, message, details)
    return Classified(job_pb2.FAILURE_KIND_TRANSIENT, error_type, message, details)


def to_failure(c: Classified) -> worker_service_pb2.Failure:
    """Build the wire Failure of a classified error."""
    f = worker_service_pb2.Failure(kind=c.kind, error_type=c.error_type, message=c.message, details=c.details)
    if c.retry_after is not None:
        f.retry_after.FromNanoseconds(int(c.retry_after * 1e9))
    return f
