package io.jobwire.worker;

/**
 * A result the {@link ResultEncoder} could not encode: fatal, since every retry would produce the
 * same value. The broker records the encoder's exception, which is this exception's cause.
 */
public final class ResultException extends FatalException {
  private static final long serialVersionUID = 1L;

  public ResultException(String message, Throwable cause) {
    super(message, cause);
  }
}
