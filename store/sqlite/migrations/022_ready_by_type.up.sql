-- Ready jobs by type, in dispatch order. A lease for a worker of every queue read jobs_open
-- from the front and passed over every ready job of the types it does not handle: beside
-- 100,000 waiting jobs of a type no worker handled, in the queue the workers took, a drain of
-- another type ran at a third of its rate and the time from enqueue to start grew from a
-- millisecond to 51. Through this index such a lease reads the ready jobs of its types and no
-- other (leaseQuery in tx.go), and an offer looks only for jobs its worker could take
-- (offerFreeSQL in offer.go).
CREATE INDEX IF NOT EXISTS jobs_ready_type ON jobs (type, priority DESC, run_at, id) WHERE state = 2;
