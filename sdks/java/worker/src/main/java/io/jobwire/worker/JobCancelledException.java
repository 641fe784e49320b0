package io.jobwire.worker;

import java.util.concurrent.CancellationException;

/**
 * Thrown by {@link JobContext#sleep} and {@link JobContext#throwIfCancelled} once the job was
 * cancelled, to unwind the handler. After a cancel from the broker nothing is reported, so
 * letting it escape the handler is the expected way out.
 */
public final class JobCancelledException extends CancellationException {
  private static final long serialVersionUID = 1L;

  private final transient CancelReason reason;

  public JobCancelledException(long jobId, CancelReason reason) {
    super("job " + jobId + " cancelled: " + reason.label());
    this.reason = reason;
  }

  public CancelReason reason() {
    return reason;
  }
}
