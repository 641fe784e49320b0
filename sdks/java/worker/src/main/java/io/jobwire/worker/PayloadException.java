package io.jobwire.worker;

/**
 * A payload the {@link PayloadDecoder} could not decode: fatal, since every retry would read the
 * same bytes. The broker records the decoder's exception (its type, message and stack trace),
 * which is this exception's cause.
 */
public final class PayloadException extends FatalException {
  private static final long serialVersionUID = 1L;

  public PayloadException(String message, Throwable cause) {
    super(message, cause);
  }
}
