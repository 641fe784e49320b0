package io.jobwire.worker;

/**
 * Marks an exception type as fatal: a failure that no retry can fix, so the job goes to the
 * dead-letter queue at once. Implement it on your own exception classes (it has no methods), or
 * throw a {@link FatalException}.
 */
public interface Fatal {}
