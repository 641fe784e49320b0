package io.jobwire.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class LeasesTest {
  @ParameterizedTest(name = "lease {0}ms, heartbeat {1}ms: margin {2}ms")
  @CsvSource({
    "30000, 10000, 3000", // the broker's defaults: a tenth
    "3000, 1000, 300",
    "1000, 333, 250", // the floor
    "600000, 200000, 5000", // the ceiling
    "1000, 800, 100", // half of what a heartbeat has left
    "1000, 1000, 0",
    "1000, 2000, 0", // a heartbeat slower than the lease leaves no margin at all
  })
  void aTenthBoundedByFloorCeilingAndTheHeartbeat(long lease, long heartbeat, long want) {
    assertEquals(Duration.ofMillis(want), Leases.margin(Duration.ofMillis(lease), Duration.ofMillis(heartbeat)));
  }
}
