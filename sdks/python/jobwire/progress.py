"""How a job's progress reports are thinned out before they reach the broker.

A handler may report progress as often as it likes (every row of a million-row import); the
broker keeps only the newest report, so the worker sends at most one per job per interval
(a second), and the last one always: a report held back goes out when the interval is over
(unless a newer one replaced it first), or right before the job's result if that comes
first. Nothing goes after the result (docs/protocol.md).
"""

from __future__ import annotations

import math
import threading
from typing import Generic, Optional, Tuple, TypeVar

#: The least time between two progress reports of one job, in seconds.
PROGRESS_INTERVAL = 1.0

#: The longest progress message the broker takes, in bytes of UTF-8 (Progress.message).
MAX_PROGRESS_MESSAGE_BYTES = 256

R = TypeVar("R")


class ProgressThrottle(Generic[R]):
    """At most one report per interval, the last one always; nothing once closed.

    Time is passed in (seconds of a monotonic clock), so that tests move it by hand. A handler
    thread offers reports while the worker's loop sends them, hence the lock.
    """

    def __init__(self, interval: float = PROGRESS_INTERVAL):
        self._interval = interval
        self._lock = threading.Lock()
        self._sent_at: Optional[float] = None
        self._pending: Optional[R] = None
        self._armed = False  # a flush is scheduled for the pending report
        self._closed = False

    def offer(self, now: float, report: R) -> Tuple[Optional[R], Optional[float]]:
        """Offer a report at now. Returns what to send at once (or None), and when to call
        due() for a report held back (or None: a flush is already scheduled, or none is needed)."""
        with self._lock:
            if self._closed:
                return None, None
            if self._sent_at is None or now >= self._sent_at + self._interval:
                self._sent_at = now
                self._pending = None
                return report, None
            self._pending = report
            if self._armed:
                return None, None
            self._armed = True
            return None, self._sent_at + self._interval

    def due(self, now: float) -> Optional[R]:
        """The held-back report to send now, if one is still waiting."""
        with self._lock:
            self._armed = False
            report, self._pending = self._pending, None
            if self._closed or report is None:
                return None
            self._sent_at = now
            return report

    def close(self) -> Optional[R]:
        """Stop: the job's result goes next (or the job is gone). Returns the report held back,
        to send before the result; later offers are dropped."""
        with self._lock:
            report = None if self._closed else self._pending
            self._closed = True
            self._pending = None
            return report


def check_fraction(fraction: Optional[float]) -> Optional[float]:
    """fraction as a float in 0..1, or None; anything else is a ValueError naming it."""
    if fraction is None:
        return None
    f = float(fraction)
    if math.isnan(f) or not 0.0 <= f <= 1.0:
        raise ValueError(f"progress fraction {fraction!r} is not between 0 and 1")
    return f


def clip_message(message: str) -> str:
    """message cut to MAX_PROGRESS_MESSAGE_BYTES of UTF-8, at a character boundary: a progress
    line is for people, and a long one is better shortened than refused."""
    b = message.encode("utf-8")
    if len(b) <= MAX_PROGRESS_MESSAGE_BYTES:
        return message
    return b[:MAX_PROGRESS_MESSAGE_BYTES].decode("utf-8", errors="ignore")
