package io.jobwire.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.time.Duration;
import org.junit.jupiter.api.Test;

class BackoffTest {
  @Test
  void theCeilingDoublesUpToTheCap() {
    Backoff b = new Backoff(Duration.ofMillis(200), Duration.ofSeconds(30), () -> 0);
    long[] want = {200, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000};
    for (int n = 0; n < want.length; n++) {
      assertEquals(Duration.ofMillis(want[n]), b.ceiling(n), "after " + n + " failures");
    }
    assertEquals(Duration.ofSeconds(30), b.ceiling(Integer.MAX_VALUE));
  }

  @Test
  void aDrawScalesTheCeilingAndResetStartsOver() {
    double[] draws = {0.5, 0.25, 0.999};
    int[] i = {0};
    Backoff b = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(1), () -> draws[i[0]++ % draws.length]);
    assertEquals(Duration.ofMillis(50), b.next()); // 0.5 of 100
    assertEquals(Duration.ofMillis(50), b.next()); // 0.25 of 200
    b.reset();
    assertEquals(Duration.ofNanos((long) (0.999 * 100_000_000)), b.next());
  }

  @Test
  void badBoundsAreRefused() {
    assertThrows(IllegalArgumentException.class, () -> new Backoff(Duration.ZERO, Duration.ofSeconds(1), () -> 0));
    assertThrows(IllegalArgumentException.class, () -> new Backoff(Duration.ofSeconds(2), Duration.ofSeconds(1), () -> 0));
  }
}
