-- Batches: groups of jobs whose callbacks are enqueued once, when the last of them is final
-- (store/sqlite/batches.go). A job's batch_counted says its final state is in its batch's
-- counts: each job is counted once, whatever repeats of its final write come.
CREATE TABLE batches (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    description     TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    closed_at       INTEGER,
    completed_at    INTEGER,
    total           INTEGER NOT NULL DEFAULT 0,
    succeeded       INTEGER NOT NULL DEFAULT 0,
    dead            INTEGER NOT NULL DEFAULT 0,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    on_success      TEXT,
    on_complete     TEXT,
    success_job_id  INTEGER,
    complete_job_id INTEGER
);

ALTER TABLE jobs ADD COLUMN batch_id INTEGER;
ALTER TABLE jobs ADD COLUMN batch_counted INTEGER NOT NULL DEFAULT 0;

-- A batch's jobs: its size at close, its failed jobs for the callbacks. Not by state: a job
-- changes state four times on its way, and each change would rewrite the entry.
CREATE INDEX jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL;
