-- The shut breakers, read with every lease's COMMIT (BreakerShutAtCommit): few or none of a
-- table of one row per job type, so the read costs the same however many types there are.
CREATE INDEX breakers_shut ON breakers (type) WHERE shut;
