package io.jobwire.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.NoSuchElementException;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import jobwire.v1.JobOuterClass.FailureKind;
import jobwire.v1.WorkerServiceOuterClass.Failure;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class FailuresTest {
  /** An exception of the application's that says it is fatal. */
  static final class UnknownCustomerException extends Exception implements Fatal {
    private static final long serialVersionUID = 1L;

    UnknownCustomerException(String m) {
      super(m);
    }
  }

  static Stream<Arguments> classified() {
    return Stream.of(
        // Java's bug exceptions and their subclasses: FATAL.
        Arguments.of(new IllegalArgumentException("bad"), true, "java.lang.IllegalArgumentException"),
        Arguments.of(new NumberFormatException("not a number"), true, "java.lang.NumberFormatException"),
        Arguments.of(new NullPointerException("null"), true, "java.lang.NullPointerException"),
        Arguments.of(new ClassCastException("cast"), true, "java.lang.ClassCastException"),
        Arguments.of(new ArrayIndexOutOfBoundsException(3), true, "java.lang.ArrayIndexOutOfBoundsException"),
        Arguments.of(new ArrayStoreException("java.lang.Integer"), true, "java.lang.ArrayStoreException"),
        Arguments.of(new NoSuchElementException("empty"), true, "java.util.NoSuchElementException"),
        Arguments.of(new ArithmeticException("/ by zero"), true, "java.lang.ArithmeticException"),
        Arguments.of(new UnsupportedOperationException("no"), true, "java.lang.UnsupportedOperationException"),
        Arguments.of(new AssertionError("broken invariant"), true, "java.lang.AssertionError"),
        // Explicitly fatal.
        Arguments.of(new FatalException("no recipient"), true, "io.jobwire.worker.FatalException"),
        Arguments.of(new UnknownCustomerException("customer 7"), true, "io.jobwire.worker.FailuresTest$UnknownCustomerException"),
        // Everything else: TRANSIENT, whatever it wraps.
        Arguments.of(new IOException("connection reset"), false, "java.io.IOException"),
        Arguments.of(new UncheckedIOException(new IOException("reset")), false, "java.io.UncheckedIOException"),
        Arguments.of(new IllegalStateException("pool closed"), false, "java.lang.IllegalStateException"),
        Arguments.of(new TimeoutException("slow"), false, "java.util.concurrent.TimeoutException"),
        Arguments.of(new InterruptedException(), false, "java.lang.InterruptedException"),
        Arguments.of(new RuntimeException(new IllegalArgumentException("wrapped")), false, "java.lang.RuntimeException"),
        Arguments.of(new OutOfMemoryError("heap"), false, "java.lang.OutOfMemoryError"));
  }

  @ParameterizedTest
  @MethodSource("classified")
  void theThrownClassDecidesTheKind(Throwable t, boolean fatal, String type) {
    Failure f = Failures.of(t);
    assertEquals(fatal ? FailureKind.FAILURE_KIND_FATAL : FailureKind.FAILURE_KIND_TRANSIENT, f.getKind());
    assertEquals(type, f.getErrorType());
    assertEquals(t.getMessage() == null ? "" : t.getMessage(), f.getMessage());
    assertTrue(f.getDetails().startsWith(type), f.getDetails());
    assertFalse(f.hasRetryAfter());
  }

  @Test
  void retryAfterIsTransientWithItsDelayAndDescribesItsCause() {
    Failure f = Failures.of(new RetryAfterException(Duration.ofMillis(1500), new IOException("429 Too Many Requests")));
    assertEquals(FailureKind.FAILURE_KIND_TRANSIENT, f.getKind());
    assertEquals("java.io.IOException", f.getErrorType());
    assertEquals("429 Too Many Requests", f.getMessage());
    assertEquals(1, f.getRetryAfter().getSeconds());
    assertEquals(500_000_000, f.getRetryAfter().getNanos());

    f = Failures.of(new RetryAfterException(Duration.ofSeconds(2)));
    assertEquals("io.jobwire.worker.RetryAfterException", f.getErrorType());
    assertEquals("retry after 2000ms", f.getMessage());
  }

  static Stream<Arguments> codecErrors() {
    return Stream.of(
        Arguments.of(new PayloadException("job 1: the payload is not an Email", new IOException("Unexpected character"))),
        Arguments.of(new ResultException("job 1: the result could not be encoded", new IOException("Unexpected character"))));
  }

  @ParameterizedTest
  @MethodSource("codecErrors")
  void aPayloadOrResultTheCodecRefusedIsFatalWithTheCodecsError(FatalException e) {
    Failure f = Failures.of(e);
    assertEquals(FailureKind.FAILURE_KIND_FATAL, f.getKind());
    assertEquals("java.io.IOException", f.getErrorType());
    assertEquals("Unexpected character", f.getMessage());
  }

  @Test
  void aNegativeRetryAfterIsRefused() {
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> new RetryAfterException(Duration.ofSeconds(-1)));
  }
}
