package io.jobwire.worker;

import java.nio.charset.StandardCharsets;
import jobwire.v1.JobOuterClass.JobState;

/**
 * The result of a job this one depends on, as its assignment carries it.
 *
 * @param jobId the parent's id
 * @param type the parent's job type
 * @param result what the parent's handler set as its result; empty if nothing
 * @param state {@code JOB_STATE_SUCCEEDED}, or {@code JOB_STATE_DEAD} or {@code
 *     JOB_STATE_CANCELLED} for a job enqueued to run whatever its parents' outcome
 */
public record ParentResult(long jobId, String type, byte[] result, JobState state) {
  /** The result as UTF-8 text. */
  public String resultText() {
    return new String(result, StandardCharsets.UTF_8);
  }
}
