package io.jobwire.worker;

/**
 * Runs one job whose payload the worker's {@link PayloadDecoder} has decoded into a {@code T}. A
 * payload that does not decode never reaches it: that attempt fails as FATAL.
 *
 * @param <T> the payload's type
 */
@FunctionalInterface
public interface TypedHandler<T> {
  void handle(JobContext ctx, T payload) throws Exception;
}
