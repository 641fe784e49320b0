-- A succeeded job's result (NULL when it returned none) and the newest progress its running
-- (or last) attempt reported. They live in the job row, so the success that stores a result is
-- the one write it always was, and retention deletes them with the job.
ALTER TABLE jobs ADD COLUMN result BLOB;
ALTER TABLE jobs ADD COLUMN progress_attempt INTEGER;
ALTER TABLE jobs ADD COLUMN progress_fraction REAL;
ALTER TABLE jobs ADD COLUMN progress_message TEXT;
ALTER TABLE jobs ADD COLUMN progress_at INTEGER;
