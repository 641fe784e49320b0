package io.jobwire.worker;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.DoubleSupplier;

/**
 * Reconnect backoff: exponential growth with full jitter. After the n-th consecutive failure the
 * wait is {@code U[0,1) * min(cap, base * 2^(n-1))}; a uniform draw between zero and the ceiling
 * spreads the reconnects of a fleet of workers after a broker restart. Not thread-safe: the
 * worker uses it from one thread.
 */
public final class Backoff {
  private final long baseNanos;
  private final long capNanos;
  private final DoubleSupplier random;
  private int failures;

  /** The libraries' defaults: base 200 ms, cap 30 s. */
  public Backoff() {
    this(Duration.ofMillis(200), Duration.ofSeconds(30), () -> ThreadLocalRandom.current().nextDouble());
  }

  /**
   * @param random a source of draws in [0, 1)
   */
  public Backoff(Duration base, Duration cap, DoubleSupplier random) {
    if (base.isNegative() || base.isZero() || cap.compareTo(base) < 0) {
      throw new IllegalArgumentException("backoff: need 0 < base <= cap, got base " + base + ", cap " + cap);
    }
    this.baseNanos = base.toNanos();
    this.capNanos = cap.toNanos();
    this.random = Objects.requireNonNull(random, "random");
  }

  /** The largest wait after {@code failures} consecutive failures (at least 1). */
  public Duration ceiling(int failures) {
    long c = baseNanos;
    for (int i = 1; i < failures && c < capNanos; i++) {
      c = c > capNanos / 2 ? capNanos : c * 2; // doubling, without overflowing past the cap
    }
    return Duration.ofNanos(Math.min(c, capNanos));
  }

  /** Records one more failure and returns how long to wait before the next try. */
  public Duration next() {
    failures++;
    return Duration.ofNanos((long) (random.getAsDouble() * ceiling(failures).toNanos()));
  }

  /** Forgets past failures, after a connection succeeded. */
  public void reset() {
    failures = 0;
  }
}
