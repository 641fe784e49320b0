-- Ready jobs by type, in dispatch order. A lease for a worker of one type and every queue read
-- jobs_ready from the front and passed over every ready job of the other types: beside a
-- backlog of a type no worker handled, each lease read all of it. Through this index such a
-- lease reads the ready jobs of its type and no other (leaseWhere in tx.go).
CREATE INDEX IF NOT EXISTS jobs_ready_type ON jobs (type, priority DESC, run_at, id) WHERE state = 2;
