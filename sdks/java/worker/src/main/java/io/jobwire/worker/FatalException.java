package io.jobwire.worker;

/**
 * Throw to send the job to the dead-letter queue without further retries. The broker records this
 * class's name as the error type; to record your own, implement {@link Fatal} on your exception.
 */
public class FatalException extends RuntimeException implements Fatal {
  private static final long serialVersionUID = 1L;

  public FatalException(String message) {
    super(message);
  }

  public FatalException(String message, Throwable cause) {
    super(message, cause);
  }
}
