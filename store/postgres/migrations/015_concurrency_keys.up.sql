-- Concurrency per key: at most concurrency_limit jobs of one concurrency_key leased or running
-- at once. The key is computed at enqueue (a configured rule's key expression, or the key the
-- producer gave) and stored with the job; concurrency_rule names the rule that set it ('' for
-- the producer's own), so that changing or removing a rule reaches the jobs still waiting.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS concurrency_key text NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS concurrency_limit integer NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS concurrency_rule text NOT NULL DEFAULT '';
-- The keyed jobs that wait, for the fair lease (keyconc.go): it ranks each key's jobs.
CREATE INDEX IF NOT EXISTS jobs_ready_keyed ON jobs (concurrency_key, priority DESC, run_at, id)
	WHERE state = 2 AND concurrency_key <> '';
-- The keyed jobs held, counted per key under the keys' lock.
CREATE INDEX IF NOT EXISTS jobs_held_keyed ON jobs (concurrency_key)
	WHERE state IN (3, 4) AND concurrency_key <> '';
-- The configured rules, shared by every broker of the database.
CREATE TABLE IF NOT EXISTS concurrency_rules (
	name text PRIMARY KEY,
	job_type text NOT NULL DEFAULT '',
	queue text NOT NULL DEFAULT '',
	key_expr text NOT NULL,
	max_running integer NOT NULL,
	updated_at bigint NOT NULL DEFAULT 0
);
-- When each key last had a job leased (Unix nanoseconds), written under the keys' lock: among
-- keys with equally few jobs running, the one served longest ago goes first (round-robin).
CREATE TABLE IF NOT EXISTS concurrency_turns (
	concurrency_key text PRIMARY KEY,
	served bigint NOT NULL
);
