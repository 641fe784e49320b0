package io.jobwire.worker;

import java.time.Duration;

/**
 * The worker's own view of a lease: how much sooner than the broker it gives a lease up.
 *
 * <p>A broker that is frozen or cut off cannot send Cancel, yet its lease runs out all the same
 * and the job's next attempt may start elsewhere. So the worker cancels a handler (reason {@link
 * CancelReason#LEASE_LOST}) once its lease has passed on the worker's own clock without an
 * extension; see "Leases, fencing tokens and heartbeats" in docs/protocol.md. The worker knows
 * only durations, never the broker's clock: it counts a lease from the arrival of its Assignment,
 * and an extension from when it sent the oldest heartbeat that named the lease and had no answer
 * yet (the broker extends from when it reads that heartbeat, which is later).
 */
public final class Leases {
  static final Duration MIN_MARGIN = Duration.ofMillis(250);
  static final Duration MAX_MARGIN = Duration.ofSeconds(5);

  private Leases() {}

  /**
   * A tenth of the lease, at least 250 ms and at most 5 s, to cover the latency between the
   * broker granting a lease and the worker hearing of it, the time the broker takes to store an
   * extension and the drift between the two clocks' rates; never more than half of what a
   * heartbeat has left (lease - heartbeat), so that a healthy broker's extension arrives in time.
   */
  public static Duration margin(Duration lease, Duration heartbeat) {
    Duration m = lease.dividedBy(10);
    if (m.compareTo(MIN_MARGIN) < 0) {
      m = MIN_MARGIN;
    }
    if (m.compareTo(MAX_MARGIN) > 0) {
      m = MAX_MARGIN;
    }
    Duration half = lease.minus(heartbeat).dividedBy(2);
    if (half.compareTo(m) < 0) {
      m = half;
    }
    return m.isNegative() ? Duration.ZERO : m;
  }
}
