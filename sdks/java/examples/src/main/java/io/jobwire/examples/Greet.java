package io.jobwire.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.jobwire.worker.FatalException;
import io.jobwire.worker.Worker;

/**
 * A worker for job type {@code greet}, whose JSON payload {"name": "Ada"} Jackson decodes into a
 * record. It reads the broker's address, token and TLS settings from the JOBWIRE_* variables.
 */
public final class Greet {
  record Greeting(String name) {}

  private Greet() {}

  public static void main(String[] args) throws Exception {
    Worker worker = Worker.fromEnv()
        .workerId(System.getenv("JOBWIRE_WORKER_ID"))
        .capacity(4)
        .payloadDecoder(new ObjectMapper()::readValue)
        .build();
    worker.handle("greet", Greeting.class, (ctx, g) -> {
      if (g.name() == null || g.name().isEmpty()) {
        throw new FatalException("no name to greet"); // straight to the dead-letter queue
      }
      System.out.println("hello, " + g.name() + " (job " + ctx.id() + ", attempt " + ctx.attempt() + ")");
    });
    worker.installSignalHandlers(); // Ctrl-C or SIGTERM: a graceful drain
    worker.run();
  }
}
