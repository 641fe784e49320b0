-- Ready jobs by queue, in dispatch order. A lease for a worker that names its queues read
-- jobs_open from the front and passed over every ready job of the other queues: beside a
-- queue of 100,000 waiting jobs that no worker served, each lease read all of them, and a
-- drain of another queue ran at a quarter of its rate. Through this index a lease reads the
-- ready jobs of the queues it names and no other (leaseQuery in tx.go).
CREATE INDEX IF NOT EXISTS jobs_ready_queue ON jobs (queue, priority DESC, run_at, id) WHERE state = 2;
