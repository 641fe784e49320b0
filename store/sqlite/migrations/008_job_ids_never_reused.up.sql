-- Job ids are never reused. Without AUTOINCREMENT SQLite gives a new row the largest id in the
-- table plus one, so after the newest jobs were deleted (retention, a purge of the dead-letter
-- queue) the next job got the id of a deleted one, and anyone who kept that id read another
-- job. With AUTOINCREMENT the largest id ever given out is kept in sqlite_sequence.
--
-- Idempotency keys are scoped by job type: the same key names one job of each type. A key is
-- free again once its job is deleted (retention or a purge).
--
-- SQLite cannot add AUTOINCREMENT to a table, so jobs is built again, and attempts with it: its
-- rows point at jobs, and with foreign keys on, dropping jobs would delete them. The new tables
-- point at each other from the start; renaming jobs_new to jobs renames the reference in
-- attempts_new too. Every id is copied as it is, and copying them starts the sequence at the
-- largest (ids deleted before this migration and above it are not known any more).
CREATE TABLE jobs_new (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
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
    started_at         INTEGER,
    attempt_base       INTEGER NOT NULL DEFAULT 0,
    requeued_at        INTEGER,
    lease_secret       BLOB,
    lease_owner        TEXT    NOT NULL DEFAULT ''
);

INSERT INTO jobs_new (id, type, queue, payload, priority, state, attempts, max_attempts, run_at,
        created_at, finished_at, idempotency_key, attempt_timeout_ns, dead_reason, last_error_type,
        last_error_message, lease_token, lease_expires_at, attempt_deadline, worker_id, started_at,
        attempt_base, requeued_at, lease_secret, lease_owner)
    SELECT id, type, queue, payload, priority, state, attempts, max_attempts, run_at,
        created_at, finished_at, idempotency_key, attempt_timeout_ns, dead_reason, last_error_type,
        last_error_message, lease_token, lease_expires_at, attempt_deadline, worker_id, started_at,
        attempt_base, requeued_at, lease_secret, lease_owner
    FROM jobs;

CREATE TABLE attempts_new (
    job_id       INTEGER NOT NULL REFERENCES jobs_new (id) ON DELETE CASCADE,
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

INSERT INTO attempts_new SELECT job_id, number, worker_id, started_at, finished_at, outcome,
    failure_kind, error_type, message, details FROM attempts;

-- Children first: with attempts gone, dropping jobs deletes nothing else. Dropping a table
-- fires no triggers, and takes its indexes and triggers with it.
DROP TABLE attempts;
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;
ALTER TABLE attempts_new RENAME TO attempts;

CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (type, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_open ON jobs (state, priority DESC, run_at, id) WHERE state BETWEEN 2 AND 4;
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 1;
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE state BETWEEN 5 AND 7;
CREATE INDEX jobs_dead_error ON jobs (last_error_type, finished_at) WHERE state = 6;
CREATE INDEX attempts_finished ON attempts (finished_at);

-- As in migration 004.
CREATE TRIGGER finished_totals_delete AFTER DELETE ON jobs WHEN old.state BETWEEN 5 AND 7
BEGIN
    UPDATE finished_totals SET n = n - 1
        WHERE queue = old.queue AND type = old.type AND state = old.state;
END;
