-- The jobs in creation order, for the job list (JobList), which lists by creation time as the
-- PostgreSQL store does, where ids follow creation only within one broker.
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at, id);
