-- Batches: groups of jobs whose callbacks are enqueued once, when the last of them is final
-- (store/postgres/batches.go). A job's batch_counted says its final state is in its batch's
-- counts: each job is counted once, whatever repeats of its final write come.
CREATE TABLE IF NOT EXISTS batches (
    id              bigserial PRIMARY KEY,
    description     text   NOT NULL DEFAULT '',
    created_at      bigint NOT NULL,
    closed_at       bigint,
    completed_at    bigint,
    total           bigint NOT NULL DEFAULT 0,
    succeeded       bigint NOT NULL DEFAULT 0,
    dead            bigint NOT NULL DEFAULT 0,
    cancelled       bigint NOT NULL DEFAULT 0,
    on_success      jsonb,
    on_complete     jsonb,
    success_job_id  bigint,
    complete_job_id bigint
);

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS batch_id bigint;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS batch_counted boolean NOT NULL DEFAULT false;

-- A batch's jobs: its size at close, its failed jobs for the callbacks. Not by state: a job
-- changes state four times on its way, and each change would rewrite the entry.
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL;
