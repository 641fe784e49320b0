"""The worker's own view of a lease: when it gives a lease up if the broker does not extend it.

A broker that is frozen or cut off cannot send Cancel, yet its lease runs out all the same and
the job's next attempt may start elsewhere. So the worker cancels a handler (reason
"lease_lost") once its lease has passed on the worker's own clock without an extension; see
"Leases, fencing tokens and heartbeats" in docs/protocol.md.

The worker knows only durations, never the broker's clock. It counts a lease from the arrival of
its Assignment, and an extension from when it sent the oldest heartbeat that named the lease and
had no answer yet (the broker extends from when it reads that heartbeat, which is later), and
gives the lease up lease_margin() before the broker would.
"""

from __future__ import annotations

MIN_MARGIN = 0.25  # seconds
MAX_MARGIN = 5.0  # seconds


def lease_margin(lease: float, heartbeat: float) -> float:
    """How much sooner than the broker the worker gives a lease up, in seconds.

    A tenth of the lease, at least MIN_MARGIN and at most MAX_MARGIN, to cover the latency
    between the broker granting a lease and the worker hearing of it, the time the broker takes
    to store an extension and the drift between the two clocks' rates; never more than half of
    what a heartbeat has left (lease - heartbeat), so a healthy broker's extension arrives in time.
    """
    m = min(max(lease / 10, MIN_MARGIN), MAX_MARGIN)
    return max(min(m, (lease - heartbeat) / 2), 0.0)
