-- The audit trail: one row per operator action (a queue paused, dead jobs purged, a token
-- revoked...), written in the action's own transaction. job_ids is a JSON array of the first
-- ids the action changed; count says how many it changed in all. Rows older than the audit
-- retention are deleted by at, hence its index.
CREATE TABLE audit_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    action     TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL,
    actor_name TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    peer       TEXT    NOT NULL,
    broker_id  TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    detail     TEXT    NOT NULL,
    count      INTEGER NOT NULL,
    job_ids    TEXT    NOT NULL
);
CREATE INDEX audit_events_at ON audit_events (at);
