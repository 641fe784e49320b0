-- The partial indexes of unfinished and finished jobs were conditioned on IN lists of three
-- states. SQLite checks a partial index's condition on every row an INSERT, UPDATE or DELETE
-- touches, and it evaluates an IN list of three or more constants by building a temporary
-- b-tree, once per statement run. On the dispatch path (insert, lease, finish: one statement
-- each per job) that cost more than the row changes themselves. A range over the same states
-- is two comparisons. Queries repeat these conditions word for word (openState and
-- finishedState in tx.go), or SQLite would not use the indexes.
DROP INDEX jobs_open;
CREATE INDEX jobs_open ON jobs (state, priority DESC, run_at, id) WHERE state BETWEEN 2 AND 4;

DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE state BETWEEN 5 AND 7;
