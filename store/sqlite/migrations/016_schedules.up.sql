-- Periodic schedules: the definition the broker encodes (spec, JSON), where each stands, and
-- the occurrences enqueued, one row per schedule and fire time, so that none is enqueued twice.
CREATE TABLE IF NOT EXISTS schedules (
	name             TEXT PRIMARY KEY,
	spec             BLOB NOT NULL,
	from_config      INTEGER NOT NULL DEFAULT 0,
	paused           INTEGER NOT NULL DEFAULT 0,
	note             TEXT NOT NULL DEFAULT '',
	next_fire_at     INTEGER NOT NULL,
	last_fire_at     INTEGER,
	last_job_id      INTEGER NOT NULL DEFAULT 0,
	buffered_fire_at INTEGER,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS schedule_occurrences (
	schedule TEXT NOT NULL,
	fire_at  INTEGER NOT NULL,
	job_id   INTEGER NOT NULL,
	PRIMARY KEY (schedule, fire_at)
) WITHOUT ROWID;
