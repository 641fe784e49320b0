package io.jobwire.worker;

/**
 * Turns a job's payload bytes into a value of the handler's type: the JSON mapper of your choice.
 * With Jackson it is a method reference, {@code new ObjectMapper()::readValue}; with Gson,
 * {@code (bytes, type) -> gson.fromJson(new String(bytes, UTF_8), type)}.
 *
 * <p>Whatever it throws is a payload no retry can fix, so the attempt fails as FATAL with the
 * exception's own type name (see {@link PayloadException}).
 */
@FunctionalInterface
public interface PayloadDecoder {
  <T> T decode(byte[] payload, Class<T> type) throws Exception;
}
