-- The audit trail: one row per operator action (a queue paused, dead jobs purged, a token
-- revoked...), written in the action's own transaction, by whichever broker did it. job_ids
-- holds the first ids the action changed; count says how many it changed in all. Rows older
-- than the audit retention are deleted by at, hence its index.
CREATE TABLE audit_events (
    id         bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         bigint   NOT NULL,
    action     text     NOT NULL,
    actor_id   text     NOT NULL,
    actor_name text     NOT NULL,
    source     text     NOT NULL,
    peer       text     NOT NULL,
    broker_id  text     NOT NULL,
    target     text     NOT NULL,
    detail     text     NOT NULL,
    count      bigint   NOT NULL,
    job_ids    bigint[] NOT NULL
);
CREATE INDEX audit_events_at ON audit_events (at);
