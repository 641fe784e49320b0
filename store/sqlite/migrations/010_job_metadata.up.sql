-- Job metadata: string keys and values the producer attaches to a job (W3C trace context,
-- or the user's own keys), stored as a JSON object and handed to the worker with the job.
-- NULL when a job has none.
ALTER TABLE jobs ADD COLUMN metadata BLOB;
