"""Jobwire worker library: run handlers for jobs pushed by a Jobwire broker.

See sdks/python/README.md for a walkthrough and docs/protocol.md for the wire protocol.
"""

from jobwire.backoff import Backoff
from jobwire.context import (
    CANCEL_LEASE_LOST,
    CANCEL_REQUESTED,
    CANCEL_SHUTDOWN,
    CANCEL_TIMEOUT,
    JobContext,
    ParentResult,
)
from jobwire.connect import ConnectError, settings_from_env
from jobwire.errors import (
    FATAL_EXCEPTION_TYPES,
    Classified,
    FatalError,
    JobCancelled,
    RetryAfter,
    classify,
)
from jobwire.worker import ProtocolError, Worker, tls_credentials

__all__ = [
    "Backoff",
    "CANCEL_LEASE_LOST",
    "CANCEL_REQUESTED",
    "CANCEL_SHUTDOWN",
    "CANCEL_TIMEOUT",
    "Classified",
    "ConnectError",
    "FATAL_EXCEPTION_TYPES",
    "FatalError",
    "JobCancelled",
    "JobContext",
    "ParentResult",
    "ProtocolError",
    "RetryAfter",
    "Worker",
    "classify",
    "settings_from_env",
    "tls_credentials",
]
