package io.jobwire.worker;

/**
 * Turns a handler's result value into bytes: the JSON mapper of your choice, as the {@link
 * PayloadDecoder} reads payloads. With Jackson it is {@code new ObjectMapper()::writeValueAsBytes};
 * with Gson, {@code v -> gson.toJson(v).getBytes(UTF_8)}.
 *
 * <p>Whatever it throws fails the attempt as FATAL (a {@link ResultException}): the same value
 * would fail again.
 */
@FunctionalInterface
public interface ResultEncoder {
  byte[] encode(Object value) throws Exception;
}
