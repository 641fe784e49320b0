-- Held jobs (LEASED, RUNNING) by queue: a lease that enforces queue caps counts each capped
-- queue's held jobs (JobLeaseParams.EnforceQueues), which must not cost as much as every held
-- job of every queue.
CREATE INDEX jobs_held_queue ON jobs (queue) WHERE state IN (3, 4);
