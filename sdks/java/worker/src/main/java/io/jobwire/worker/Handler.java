package io.jobwire.worker;

/**
 * Runs one job. Return normally for success; throw for failure ({@link Worker} says how an
 * exception becomes a FATAL or TRANSIENT failure). The handler runs on a thread of its own, so it
 * may block.
 */
@FunctionalInterface
public interface Handler {
  void handle(JobContext ctx) throws Exception;
}
