-- Requeueing a dead job starts a new run of attempts. attempts counts the current run (so
-- max_attempts applies afresh) and attempt_base the attempts of every earlier run; attempt
-- records are numbered attempt_base + n, so they never collide and the whole history is kept.
ALTER TABLE jobs ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;

-- When the job was last requeued from the dead-letter queue. The retry lifetime (max_job_age)
-- counts from here rather than from created_at, or an old requeued job could not be retried.
ALTER TABLE jobs ADD COLUMN requeued_at INTEGER;

-- Throughput over the last minutes counts attempts by when they finished.
CREATE INDEX attempts_finished ON attempts (finished_at);

-- The dead-letter queue is read newest first and grouped by error type.
CREATE INDEX jobs_dead_error ON jobs (last_error_type, finished_at) WHERE state = 6;
