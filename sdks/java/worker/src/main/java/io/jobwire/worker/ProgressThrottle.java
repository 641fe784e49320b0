package io.jobwire.worker;

/**
 * How a job's progress reports are thinned out before they reach the broker.
 *
 * <p>A handler may report progress as often as it likes (every row of a million-row import); the
 * broker keeps only the newest report, so the worker sends at most one per job per interval (a
 * second), and the last one always: a report held back goes out when the interval is over (unless
 * a newer one replaced it first), or right before the job's result if that comes first; nothing
 * goes after the result (docs/protocol.md). Time is passed in
 * (nanoseconds of a monotonic clock), so that tests move it by hand; a handler's thread offers
 * reports while the worker's loop sends them, hence the lock.
 *
 * @param <R> a report
 */
final class ProgressThrottle<R> {
  /** The least time between two progress reports of one job. */
  static final long INTERVAL_NANOS = 1_000_000_000L;

  /** What {@link #offer} says to do: send {@code send} now, and call {@link #due} at {@code dueAt}. */
  record Offer<R>(R send, long dueAt) {
    static final long NONE = Long.MIN_VALUE;

    boolean any() {
      return send != null || dueAt != NONE;
    }
  }

  private final long intervalNanos;
  private boolean sentOnce;
  private long sentAt;
  private R pending;
  private boolean armed;
  private boolean closed;

  ProgressThrottle(long intervalNanos) {
    this.intervalNanos = intervalNanos;
  }

  /** Offers a report at now: what to send at once, and when to flush the one held back. */
  synchronized Offer<R> offer(long now, R report) {
    if (closed) {
      return new Offer<>(null, Offer.NONE);
    }
    if (!sentOnce || now - sentAt >= intervalNanos) {
      sentOnce = true;
      sentAt = now;
      pending = null;
      return new Offer<>(report, Offer.NONE);
    }
    pending = report;
    if (armed) {
      return new Offer<>(null, Offer.NONE);
    }
    armed = true;
    return new Offer<>(null, sentAt + intervalNanos);
  }

  /** The held-back report to send now, or null. */
  synchronized R due(long now) {
    armed = false;
    R report = pending;
    pending = null;
    if (closed || report == null) {
      return null;
    }
    sentAt = now;
    return report;
  }

  /**
   * Stops: the job's result goes next (or the job is gone). Returns the report held back, to send
   * before the result, or null; later offers are dropped.
   */
  synchronized R close() {
    R report = closed ? null : pending;
    closed = true;
    pending = null;
    return report;
  }
}
