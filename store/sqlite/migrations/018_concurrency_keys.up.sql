-- Concurrency per key: at most concurrency_limit jobs of one concurrency_key leased or running
-- at once. The key is computed at enqueue (a configured rule's key expression, or the key the
-- producer gave) and stored with the job; concurrency_rule names the rule that set it ('' for
-- the producer's own), so that changing or removing a rule reaches the jobs still waiting.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN concurrency_limit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN concurrency_rule TEXT NOT NULL DEFAULT '';
-- The keyed jobs that wait, for the fair lease (keyconc.go): it ranks each key's jobs.
CREATE INDEX jobs_ready_keyed ON jobs (concurrency_key, priority DESC, run_at, id)
	WHERE state = 2 AND concurrency_key <> '';
-- The keyed jobs held, counted per key.
CREATE INDEX jobs_held_keyed ON jobs (concurrency_key) WHERE state BETWEEN 3 AND 4 AND concurrency_key <> '';
CREATE TABLE concurrency_rules (
	name TEXT PRIMARY KEY,
	job_type TEXT NOT NULL DEFAULT '',
	queue TEXT NOT NULL DEFAULT '',
	key_expr TEXT NOT NULL,
	max_running INTEGER NOT NULL,
	updated_at INTEGER NOT NULL DEFAULT 0
);
-- When each key last had a job leased (Unix nanoseconds): among keys with equally few jobs
-- running, the one served longest ago goes first (round-robin).
CREATE TABLE concurrency_turns (
	concurrency_key TEXT PRIMARY KEY,
	served INTEGER NOT NULL
);
