-- The jobs in creation order, for the job list (JobList): ids follow creation only within one
-- broker, since brokers sharing the database draw their ids in blocks.
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at, id);
