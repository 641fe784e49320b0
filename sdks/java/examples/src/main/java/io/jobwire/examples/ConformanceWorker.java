package io.jobwire.examples;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.jobwire.worker.CancelReason;
import io.jobwire.worker.JobContext;
import io.jobwire.worker.RetryAfterException;
import io.jobwire.worker.Worker;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.Arrays;

/**
 * The worker that the conformance suite (conformance/ in the repository) drives. Each job type
 * exercises one protocol path.
 *
 * <p>Environment: JOBWIRE_ADDR (default 127.0.0.1:7070), JOBWIRE_WORKER_ID (default host-pid),
 * JOBWIRE_CAPACITY (default 8), JOBWIRE_QUEUES (comma-separated; default every queue),
 * JOBWIRE_GRACE_SECONDS (shutdown grace, default 30), JOBWIRE_CONFORMANCE_DIR (where counters
 * and marker files go; default a new temporary folder), JOBWIRE_TOKEN and JOBWIRE_TLS_* (a
 * broker with auth and TLS).
 *
 * <p>Job types (JSON payloads):
 *
 * <ul>
 *   <li>echo: succeeds once the payload decodes; writes the payload's bytes to DIR/echo-ID
 *   <li>fatal: throws IllegalArgumentException (FATAL)
 *   <li>flaky {"key": K, "fail_times": N}: fails with an IOException (TRANSIENT) N times per key,
 *       then succeeds; the count lives in DIR/flaky-K so it survives restarts
 *   <li>always_transient: throws IllegalStateException (TRANSIENT)
 *   <li>retry_after {"seconds": S}: throws RetryAfterException(S)
 *   <li>slow {"ms": M}: sleeps M ms, stopping early on a cancel
 *   <li>wait_cancel: waits for a cancel, then writes its reason to DIR/cancelled-ID
 *   <li>block {"marker": NAME}: writes DIR/started-NAME, then waits for a cancel and ends with it
 *   <li>result: sets the payload's bytes as the job's result
 *   <li>result_size {"bytes": N}: sets a result of N bytes ("x" each)
 *   <li>progress {"steps": N, "marker": NAME}: reports progress i/N, "step i of N", for i in 1..N
 *       at once, writes DIR/started-NAME, then waits for a cancel and ends with it
 *   <li>parents: sets its parents' results as JSON: [{"job_id", "type", "state", "result"}]
 * </ul>
 */
public final class ConformanceWorker {
  record Flaky(String key, @JsonProperty("fail_times") int failTimes) {}

  record RetryAfter(double seconds) {}

  record Slow(long ms) {}

  record Block(String marker) {}

  record ResultSize(int bytes) {}

  record Steps(int steps, String marker) {}

  record Parent(@JsonProperty("job_id") long jobId, String type, String state, String result) {}

  private static final Object FLAKY_LOCK = new Object();

  private ConformanceWorker() {}

  public static void main(String[] args) throws Exception {
    String dirEnv = System.getenv("JOBWIRE_CONFORMANCE_DIR");
    Path dir = dirEnv == null || dirEnv.isEmpty() ? Files.createTempDirectory("jobwire-conformance-") : Path.of(dirEnv);
    Files.createDirectories(dir);
    ObjectMapper mapper = new ObjectMapper();

    // Address, token and TLS from JOBWIRE_ADDR, JOBWIRE_TOKEN and JOBWIRE_TLS_*.
    Worker worker = Worker.fromEnv()
        .workerId(System.getenv("JOBWIRE_WORKER_ID"))
        .capacity(Integer.parseInt(env("JOBWIRE_CAPACITY", "8")))
        .queues(Arrays.stream(env("JOBWIRE_QUEUES", "").split(",")).filter(q -> !q.isEmpty()).toList())
        .gracePeriod(Duration.ofMillis((long) (Double.parseDouble(env("JOBWIRE_GRACE_SECONDS", "30")) * 1000)))
        .payloadDecoder(mapper::readValue)
        .resultEncoder(mapper::writeValueAsBytes)
        .build();

    worker.handle("echo", ctx -> {
      byte[] payload = ctx.payload();
      if (payload.length > 0) {
        mapper.readTree(payload); // a malformed payload fails here
      }
      writeMarker(dir, "echo-" + ctx.id(), payload);
    });
    worker.handle("fatal", ctx -> {
      throw new IllegalArgumentException("job " + ctx.id() + " is fatal by design");
    });
    worker.handle("flaky", Flaky.class, (ctx, p) -> {
      String name = "flaky-" + safeName(p.key());
      synchronized (FLAKY_LOCK) { // handlers run at once: the count must not race
        int failures = 0;
        try {
          failures = Integer.parseInt(Files.readString(dir.resolve(name)).trim());
        } catch (NoSuchFileException e) {
          // No failure yet.
        }
        if (failures < p.failTimes()) {
          writeMarker(dir, name, String.valueOf(failures + 1).getBytes(StandardCharsets.UTF_8));
          throw new IOException("flaky failure " + (failures + 1) + " of " + p.failTimes() + " for key " + p.key());
        }
      }
    });
    worker.handle("always_transient", ctx -> {
      throw new IllegalStateException("job " + ctx.id() + " fails transiently by design");
    });
    worker.handle("retry_after", RetryAfter.class, (ctx, p) -> {
      throw new RetryAfterException(Duration.ofMillis((long) (p.seconds() * 1000)), "asked to retry later");
    });
    worker.handle("slow", Slow.class, (ctx, p) -> ctx.sleep(Duration.ofMillis(p.ms())));
    worker.handle("wait_cancel", ctx -> {
      CancelReason reason = ctx.awaitCancelled();
      writeMarker(dir, "cancelled-" + ctx.id(), reason.label().getBytes(StandardCharsets.UTF_8));
      System.err.println("job " + ctx.id() + " cancelled (" + reason.label() + ")");
    });
    worker.handle("block", Block.class, (ctx, p) -> {
      writeMarker(dir, "started-" + safeName(p.marker()), String.valueOf(ctx.id()).getBytes(StandardCharsets.UTF_8));
      ctx.awaitCancelled();
      ctx.throwIfCancelled();
    });
    worker.handle("result", ctx -> ctx.setResult(ctx.payload()));
    worker.handle("result_size", ResultSize.class, (ctx, p) -> ctx.setResultText("x".repeat(p.bytes())));
    worker.handle("progress", Steps.class, (ctx, p) -> {
      for (int i = 1; i <= p.steps(); i++) {
        ctx.progress((double) i / p.steps(), "step " + i + " of " + p.steps());
      }
      writeMarker(dir, "started-" + safeName(p.marker()), String.valueOf(ctx.id()).getBytes(StandardCharsets.UTF_8));
      ctx.awaitCancelled();
      ctx.throwIfCancelled();
    });
    worker.handle("parents", ctx -> ctx.setResultValue(ctx.parentResults().stream()
        .map(p -> new Parent(p.jobId(), p.type(), p.state().name().replaceFirst("^JOB_STATE_", "").toLowerCase(), p.resultText()))
        .toList()));

    System.err.println("conformance worker state dir " + dir);
    worker.installSignalHandlers();
    worker.run();
  }

  private static String env(String name, String fallback) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? fallback : v;
  }

  /** Keeps marker file names inside the state folder whatever the payload says. */
  private static String safeName(String s) {
    return String.valueOf(s).replaceAll("[^A-Za-z0-9._-]", "_");
  }

  /** Writes a marker file whole: to a temporary name, then renamed. */
  private static void writeMarker(Path dir, String name, byte[] content) throws IOException {
    Path tmp = dir.resolve(name + ".tmp");
    Files.write(tmp, content);
    Files.move(tmp, dir.resolve(name), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

}
