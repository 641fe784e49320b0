-- A succeeded job's result (NULL when it returned none) and the newest progress its running
-- (or last) attempt reported. They live in the job row, so the success that stores a result is
-- the one write it always was, and retention deletes them with the job.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS result bytea;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_attempt integer;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_fraction double precision;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_message text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_at bigint;
