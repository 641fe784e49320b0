-- Ready jobs by queue and type, in dispatch order, in place of ready jobs by queue. A lease for
-- a worker that names its queues read each queue through jobs_ready_queue, or jobs_ready for
-- several queues, and passed over its ready jobs of the types the worker does not handle:
-- beside a backlog of a type whose workers are away, or whose breaker is open, each lease read
-- all of it. Through this index such a lease reads each of its types in each of its queues,
-- and no other job (leaseQuery in tx.go).
DROP INDEX IF EXISTS jobs_ready_queue;
CREATE INDEX IF NOT EXISTS jobs_ready_queue_type ON jobs (queue, type, priority DESC, run_at, id) WHERE state = 2;
