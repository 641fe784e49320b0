-- How many finished jobs (SUCCEEDED, DEAD, CANCELLED) each queue and type holds. Stats read
-- these rows instead of counting the jobs table, which keeps every finished job for its
-- retention period: hundreds of millions of rows on a busy broker. Unfinished jobs are few
-- and counted through the partial indexes.
CREATE TABLE finished_totals (
    queue TEXT    NOT NULL,
    type  TEXT    NOT NULL,
    state INTEGER NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, type, state)
) WITHOUT ROWID;

INSERT INTO finished_totals (queue, type, state, n)
    SELECT queue, type, state, COUNT(*) FROM jobs WHERE state BETWEEN 5 AND 7 GROUP BY queue, type, state;

-- The statements that finish jobs, or requeue dead ones, add to the totals in the same
-- transaction (tx.go, admin.go): many successes in one statement are added by queue and
-- type, once per statement. A trigger on every state change would have been simpler, but it
-- makes SQLite build the old and new row of every update on the dispatch path, leases
-- included, and it cost about a tenth of the broker's throughput. Deletions are rare and done
-- in many places (retention, purge, the dead-letter queue), so a trigger keeps those.
CREATE TRIGGER finished_totals_delete AFTER DELETE ON jobs WHEN old.state BETWEEN 5 AND 7
BEGIN
    UPDATE finished_totals SET n = n - 1
        WHERE queue = old.queue AND type = old.type AND state = old.state;
END;
