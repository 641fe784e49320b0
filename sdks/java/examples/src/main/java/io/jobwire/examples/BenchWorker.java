package io.jobwire.examples;

import io.jobwire.worker.Worker;

/**
 * A no-op worker for the benchmark ({@code jobwire-bench --worker-cmd}): serves job type {@code
 * noop}. JOBWIRE_ADDR, JOBWIRE_WORKER_ID and JOBWIRE_CONCURRENCY (default 256) configure it:
 * {@code --worker-cmd 'JAVA_OPTS=-XX:TieredStopAtLevel=1 sdks/java/examples/run.sh
 * io.jobwire.examples.BenchWorker'}, see "Measuring another worker library" in docs/performance.md.
 */
public final class BenchWorker {
  private BenchWorker() {}

  public static void main(String[] args) throws Exception {
    String concurrency = System.getenv("JOBWIRE_CONCURRENCY");
    Worker worker = Worker.fromEnv()
        .workerId(System.getenv("JOBWIRE_WORKER_ID"))
        .capacity(concurrency == null || concurrency.isEmpty() ? 256 : Integer.parseInt(concurrency))
        .build();
    worker.handle("noop", ctx -> {});
    worker.installSignalHandlers();
    worker.run();
  }
}
