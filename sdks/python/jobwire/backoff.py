"""Reconnect backoff: exponential growth with full jitter.

Full jitter (a uniform draw between zero and the exponential ceiling) spreads the reconnects of
many workers after a broker restart, so they do not arrive in lockstep.
"""

from __future__ import annotations

import random
from typing import Callable


class Backoff:
    """Computes successive reconnect delays. Not thread-safe; one per connection loop."""

    def __init__(
        self,
        base: float = 0.2,
        cap: float = 30.0,
        rand: Callable[[], float] = random.random,
    ):
        if base <= 0 or cap < base:
            raise ValueError("Backoff: need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self._rand = rand
        self._failures = 0

    def ceiling(self, failures: int) -> float:
        """The largest delay after ``failures`` consecutive failures (failures >= 1)."""
        # Bound the exponent so the float never overflows on a long outage.
        exp = min(max(failures - 1, 0), 62)
        return min(self.cap, self.base * (2.0**exp))

    def next_delay(self) -> float:
        """Record one more failure and return how long to wait before the next try."""
        self._failures += 1
        return self._rand() * self.ceiling(self._failures)

    def reset(self) -> None:
        """Forget past failures, after a connection succeeded."""
        self._failures = 0
