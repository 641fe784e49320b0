-- Jobs. Times are Unix nanoseconds (UTC). state numbers match job.State.
CREATE TABLE jobs (
    id                 INTEGER PRIMARY KEY,
    type               TEXT    NOT NULL,
    queue              TEXT    NOT NULL,
    payload            BLOB    NOT NULL,
    priority           INTEGER NOT NULL DEFAULT 0,
    state              INTEGER NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL,
    run_at             INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    idempotency_key    TEXT,
    attempt_timeout_ns INTEGER NOT NULL,
    dead_reason        INTEGER NOT NULL DEFAULT 0,
    last_error_type    TEXT    NOT NULL DEFAULT '',
    last_error_message TEXT    NOT NULL DEFAULT '',
    lease_token        INTEGER NOT NULL DEFAULT 0,
    lease_expires_at   INTEGER,
    attempt_deadline   INTEGER,
    worker_id          TEXT    NOT NULL DEFAULT '',
    started_at         INTEGER
);

CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Unfinished jobs that are ready or held, in dispatch order. Dispatch reads the state = 2 part
-- (highest priority, then oldest run_at); the sweeper reads the held part (states 3 and 4),
-- which is never larger than the workers' total capacity. Finished jobs are not in it, so the
-- cost of leasing does not grow with the history the store keeps. One index serves both on
-- purpose: every state change rewrites each index that mentions state, and this is the path
-- every job takes.
CREATE INDEX jobs_open ON jobs (state, priority DESC, run_at, id) WHERE state IN (2, 3, 4);
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 1;
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE state IN (5, 6, 7);

-- One row per attempt that reached user code and ended.
CREATE TABLE attempts (
    job_id       INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    number       INTEGER NOT NULL,
    worker_id    TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL,
    outcome      INTEGER NOT NULL,
    failure_kind INTEGER NOT NULL DEFAULT 0,
    error_type   TEXT    NOT NULL DEFAULT '',
    message      TEXT    NOT NULL DEFAULT '',
    details      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, number)
) WITHOUT ROWID;

-- Queues are created on first use.
CREATE TABLE queues (
    name              TEXT PRIMARY KEY,
    paused            INTEGER NOT NULL DEFAULT 0,
    concurrency_limit INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Circuit breaker state per job type, so a restart remembers a broken dependency.
CREATE TABLE breakers (
    type TEXT PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;
