-- Ready jobs by queue, in dispatch order. A lease for a worker that names one queue read
-- jobs_ready from the front and passed over every ready job of the other queues: beside a
-- queue of waiting jobs that no worker served, each lease read all of them. Through this
-- index such a lease reads the ready jobs of its queue and no other (leaseWhere in tx.go).
CREATE INDEX IF NOT EXISTS jobs_ready_queue ON jobs (queue, priority DESC, run_at, id) WHERE state = 2;
