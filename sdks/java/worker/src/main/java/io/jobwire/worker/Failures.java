package io.jobwire.worker;

import com.google.protobuf.Duration;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.List;
import java.util.NoSuchElementException;
import jobwire.v1.JobOuterClass.FailureKind;
import jobwire.v1.WorkerServiceOuterClass.Failure;

/**
 * Turns what a handler threw into the protocol's Failure.
 *
 * <p>Only the worker knows whether an error is a code or payload bug (FATAL: the job goes to the
 * dead-letter queue at once) or a passing condition (TRANSIENT: the broker retries with backoff).
 * Retrying a bug only burns attempts, so Java's "bug" exceptions are FATAL: {@link
 * #FATAL_TYPES}, their subclasses, anything marked {@link Fatal} (including {@link
 * FatalException} and a payload the decoder refused, {@link PayloadException}). Everything else,
 * checked exceptions and {@link IllegalStateException} included, is TRANSIENT. Only the thrown
 * exception's own class counts, not its causes: wrapping a bug in a RuntimeException makes it
 * transient.
 */
public final class Failures {
  /**
   * The standard exception types that mean a bug in the handler or in the payload it was given:
   * a bad argument or number format, a null where none may be, a wrong cast, an index out of
   * range, an empty collection or iterator read, an arithmetic error, an operation not supported,
   * a failed assertion.
   */
  public static final List<Class<? extends Throwable>> FATAL_TYPES =
      List.of(
          IllegalArgumentException.class,
          NullPointerException.class,
          ClassCastException.class,
          IndexOutOfBoundsException.class,
          ArrayStoreException.class,
          NoSuchElementException.class,
          ArithmeticException.class,
          UnsupportedOperationException.class,
          AssertionError.class);

  private Failures() {}

  /** Whether t is a FATAL failure by the rules above. */
  public static boolean isFatal(Throwable t) {
    if (t instanceof Fatal) {
      return true;
    }
    for (Class<? extends Throwable> c : FATAL_TYPES) {
      if (c.isInstance(t)) {
        return true;
      }
    }
    return false;
  }

  /**
   * The wire Failure of t: its kind, the exception's class name as the error type (for a {@link
   * RetryAfterException}, or the {@link PayloadException} or {@link ResultException} of a codec,
   * with a cause, the cause's), its message and its stack trace.
   */
  static Failure of(Throwable t) {
    Throwable described = t;
    boolean wraps = t instanceof RetryAfterException || t instanceof PayloadException || t instanceof ResultException;
    if (wraps && t.getCause() != null) {
      described = t.getCause();
    }
    Failure.Builder f = describe(described);
    if (t instanceof RetryAfterException r) {
      f.setKind(FailureKind.FAILURE_KIND_TRANSIENT).setRetryAfter(toProto(r.delay()));
    } else {
      f.setKind(isFatal(t) ? FailureKind.FAILURE_KIND_FATAL : FailureKind.FAILURE_KIND_TRANSIENT);
    }
    return f.build();
  }

  /** Error type, message and stack trace of t, with no kind. */
  static Failure.Builder describe(Throwable t) {
    StringWriter trace = new StringWriter();
    t.printStackTrace(new PrintWriter(trace));
    String message = t.getMessage();
    return Failure.newBuilder()
        .setErrorType(t.getClass().getName())
        .setMessage(message == null ? "" : message)
        .setDetails(trace.toString());
  }

  static Duration toProto(java.time.Duration d) {
    return Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  static java.time.Duration fromProto(Duration d) {
    return java.time.Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }
}
