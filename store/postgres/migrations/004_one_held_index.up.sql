-- One index of held jobs, not two. Every job enters jobs_held and jobs_held_queue when it is
-- leased, and again when it starts (a new row version), and jobs_held_queue answers what
-- jobs_held did: the expiry sweep reads every held job either way (how many is bounded by the
-- workers' capacity) and sorts the few it takes.
DROP INDEX jobs_held;
