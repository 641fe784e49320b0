package io.jobwire.worker;

import io.grpc.Status;

/**
 * The worker cannot connect in a way that reconnecting would fix: the TLS settings do not match
 * the broker's ({@link Kind#TLS}: a failed handshake, TLS on one side only, a missing client
 * certificate) or the broker refused the token ({@link Kind#AUTH}). {@link Worker#run()} throws it
 * instead of reconnecting; {@link #problem()} says what happened and {@link #fix()} which setting
 * to change.
 */
public final class BrokerConnectException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What kind of setting is wrong. */
  public enum Kind {
    TLS,
    AUTH
  }

  private final Kind kind;
  private final String problem;
  private final String fix;
  private final transient Status status;

  BrokerConnectException(Kind kind, String problem, String fix, Status status, Throwable cause) {
    super("jobwire: " + problem + "; " + fix, cause);
    this.kind = kind;
    this.problem = problem;
    this.fix = fix;
    this.status = status;
  }

  public Kind kind() {
    return kind;
  }

  public String problem() {
    return problem;
  }

  public String fix() {
    return fix;
  }

  /** The status the stream failed with. */
  public Status status() {
    return status;
  }
}
