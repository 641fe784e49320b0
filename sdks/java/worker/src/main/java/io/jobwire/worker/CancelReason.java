package io.jobwire.worker;

/** Why a running job was cancelled; {@link JobContext#cancelReason()} holds it. */
public enum CancelReason {
  /** Someone called CancelJob. The broker has recorded the job as CANCELLED. */
  REQUESTED("requested"),
  /** The attempt outlived its attempt timeout; it is reported as a timeout. */
  TIMEOUT("timeout"),
  /**
   * The broker no longer considers this worker the lease holder, or the lease ran out on this
   * worker's clock without an extension (a broker that is frozen or out of reach cannot say so).
   * The job's outcome is dropped, never reported.
   */
  LEASE_LOST("lease_lost"),
  /** This worker is shutting down and its grace period ran out; reported as a transient failure. */
  SHUTDOWN("shutdown");

  private final String label;

  CancelReason(String label) {
    this.label = label;
  }

  /** The name the other Jobwire libraries use: requested, timeout, lease_lost or shutdown. */
  public String label() {
    return label;
  }
}
