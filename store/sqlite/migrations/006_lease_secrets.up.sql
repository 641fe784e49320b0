-- Lease tokens become unguessable: lease_token stays the job's lease counter and lease_secret
-- holds 128 random bits drawn for each lease. A message about a lease must name both, and the
-- fencing statements compare both for equality.
ALTER TABLE jobs ADD COLUMN lease_secret BLOB;

-- Leases granted before this migration were handed out with the counter alone, which anyone
-- could guess. They get a secret their holders never saw: every message about them is refused
-- as stale, and each lease ends as any unanswered lease does, when it expires (a started job
-- then retries, a LEASED one goes back to PENDING). No job is lost, and no guessed token can
-- take one over.
UPDATE jobs SET lease_secret = randomblob(16) WHERE state IN (3, 4);
