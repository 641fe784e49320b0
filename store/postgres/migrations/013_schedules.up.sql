-- Periodic schedules: the definition the broker encodes (spec, JSON), where each stands, and
-- the occurrences enqueued, one row per schedule and fire time, so that none is enqueued twice,
-- whichever broker fires it.
CREATE TABLE IF NOT EXISTS schedules (
	name             TEXT PRIMARY KEY,
	spec             BYTEA NOT NULL,
	from_config      BOOLEAN NOT NULL DEFAULT false,
	paused           BOOLEAN NOT NULL DEFAULT false,
	note             TEXT NOT NULL DEFAULT '',
	next_fire_at     BIGINT NOT NULL,
	last_fire_at     BIGINT,
	last_job_id      BIGINT NOT NULL DEFAULT 0,
	buffered_fire_at BIGINT,
	created_at       BIGINT NOT NULL,
	updated_at       BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS schedule_occurrences (
	schedule TEXT NOT NULL,
	fire_at  BIGINT NOT NULL,
	job_id   BIGINT NOT NULL,
	PRIMARY KEY (schedule, fire_at)
);
