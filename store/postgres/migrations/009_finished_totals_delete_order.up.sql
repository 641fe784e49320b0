-- A statement that deletes finished jobs takes them off the finished totals through the trigger
-- finished_totals_delete, whose update locked their rows in whatever order its join produced
-- them. Every broker's writer locks them sorted, by queue and type compared byte by byte, then
-- state (store/postgres/totals.go), so a delete and a writer, or two deletes, that wanted the
-- same rows could each hold one and wait for the other's. The trigger now locks them first, in
-- that order, as well for the brokers of earlier versions, which run the same trigger.
--
-- A broker that writes a delete's changes itself, with its transaction's other changes to the
-- totals in one sorted statement at the end, sets jobwire.finished_totals to 'held' (for its
-- transaction) before the delete: the trigger then leaves the totals alone.
CREATE OR REPLACE FUNCTION finished_totals_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('jobwire.finished_totals', true) = 'held' THEN
        RETURN NULL;
    END IF;
    PERFORM FROM finished_totals f
        WHERE (f.queue, f.type, f.state) IN (SELECT queue, type, state FROM gone WHERE state IN (5, 6, 7))
        ORDER BY f.queue COLLATE "C", f.type COLLATE "C", f.state
        FOR NO KEY UPDATE;
    UPDATE finished_totals f SET n = f.n - g.c
        FROM (SELECT queue, type, state, count(*) AS c FROM gone WHERE state IN (5, 6, 7)
              GROUP BY queue, type, state) g
        WHERE f.queue = g.queue AND f.type = g.type AND f.state = g.state;
    RETURN NULL;
END
$$;
