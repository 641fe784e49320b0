-- Unique jobs (JobSpec.unique): a job's unique key, the hex of a hash the broker computed at
-- enqueue, and the states in which it holds the key, as a bit mask (bit s for state s). The
-- index admits one job per key among the jobs whose state is in their own mask: a job that
-- leaves its states drops out of it, freeing the key, with no write of its own.
ALTER TABLE jobs ADD COLUMN unique_key TEXT;
ALTER TABLE jobs ADD COLUMN unique_states INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states >> state) & 1 = 1;
