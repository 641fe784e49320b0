package io.jobwire.worker;

import java.time.Duration;
import java.util.Objects;

/**
 * Throw to fail transiently and ask the broker to retry no sooner than {@link #delay()} from now,
 * instead of its computed backoff (the policy's maximum delay still caps it). Use it when a
 * dependency says when it will be ready again, such as an HTTP 429 with Retry-After.
 *
 * <p>With a cause, the broker records the cause's type, message and stack trace, so {@code throw
 * new RetryAfterException(Duration.ofSeconds(30), e)} keeps what went wrong.
 */
public class RetryAfterException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Duration delay;

  public RetryAfterException(Duration delay) {
    this(delay, "retry after " + checked(delay).toMillis() + "ms");
  }

  public RetryAfterException(Duration delay, String message) {
    super(message);
    this.delay = checked(delay);
  }

  public RetryAfterException(Duration delay, Throwable cause) {
    super(Objects.requireNonNull(cause, "cause").getMessage(), cause);
    this.delay = checked(delay);
  }

  /** How long the broker should wait before the next attempt. */
  public Duration delay() {
    return delay;
  }

  private static Duration checked(Duration d) {
    Objects.requireNonNull(d, "delay");
    if (d.isNegative()) {
      throw new IllegalArgumentException("retry-after delay must not be negative: " + d);
    }
    return d;
  }
}
