-- Rate limits: at most rate job starts per per_ns, bursts of up to burst, counting the jobs of
-- job_type and queue (any when empty), each rate key apart when key is set.
CREATE TABLE IF NOT EXISTS rate_limits (
    name       TEXT PRIMARY KEY,
    job_type   TEXT NOT NULL DEFAULT '',
    queue      TEXT NOT NULL DEFAULT '',
    key        TEXT NOT NULL DEFAULT '',
    rate       INTEGER NOT NULL,
    per_ns     INTEGER NOT NULL,
    burst      INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- Each bucket's theoretical arrival time (ratelimit.Bucket), per limit and key: a bucket never
-- stored, or one whose moment has passed, is full.
CREATE TABLE IF NOT EXISTS rate_buckets (
    name TEXT NOT NULL,
    key  TEXT NOT NULL,
    tat  INTEGER NOT NULL,
    PRIMARY KEY (name, key)
);

-- The key a job counts under in the keyed rate limits that match it, taken from the job when it
-- is enqueued.
ALTER TABLE jobs ADD COLUMN rate_key TEXT NOT NULL DEFAULT '';
