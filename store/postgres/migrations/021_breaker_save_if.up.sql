-- A breaker saved without being locked first (Tx.BreakerSaveIf): the write of a lone success
-- counted in its type's breaker then rides COMMIT instead of waiting for the breaker's lock, a
-- round trip of its own. The row is stored only if it still holds what the writer last saw,
-- and only if the successes the writer counted in it before their answer (the leases ids and
-- seqs) are stored; otherwise another broker (or an operator's change) wrote it since, or a
-- success was stale, and the transaction fails with a serialization failure, which the
-- storage retries run again, the writer locking the breaker that time.
CREATE OR REPLACE FUNCTION jobwire_breaker_save_if(breaker_type text, new_data bytea, new_shut boolean,
    seen bytea, ids bigint[], seqs bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- state + 0: read by the primary key, not an index of finished jobs, whatever the plan.
    IF EXISTS (SELECT FROM unnest(ids, seqs) AS u(id, seq) WHERE NOT EXISTS (
            SELECT FROM jobs WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.state + 0 = 5)) THEN
        RAISE EXCEPTION 'a success counted in the breaker of type % is not stored', breaker_type
            USING ERRCODE = 'serialization_failure';
    END IF;
    UPDATE breakers SET data = new_data, shut = new_shut WHERE type = breaker_type AND data = seen;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'breaker of type % changed since it was read', breaker_type
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;
