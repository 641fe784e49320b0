-- Dependencies between jobs (JobSpec.depends_on, EnqueueGraph): a job with parents waits in
-- state 8 (WAITING) until every parent SUCCEEDED, and is released (or cancelled, when a parent
-- goes DEAD or CANCELLED) by the transaction that makes its last parent final (deps.go).

-- How many parents a job has: the worker is sent their results (Assignment.parent_results)
-- only for a job that has some, read with the job's row so a lease needs no other read.
ALTER TABLE jobs ADD COLUMN parents INTEGER NOT NULL DEFAULT 0;

-- One row per edge: child_id runs after parent_id. ord is the parent's place in the order the
-- producer named them; settled says the parent's final state was applied to the child, once.
CREATE TABLE job_deps (
    parent_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    child_id  INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    ord       INTEGER NOT NULL,
    settled   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;
CREATE INDEX job_deps_child ON job_deps (child_id, ord);

-- One row per job with parents or in a graph: parents not yet settled, what to do when a
-- parent fails, its graph (the id of the graph's first job; 0: none) and, for a job cancelled
-- because of a parent, that parent.
CREATE TABLE dep_nodes (
    job_id       INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    parents_left INTEGER NOT NULL,
    run_anyway   INTEGER NOT NULL DEFAULT 0,
    graph_id     INTEGER NOT NULL DEFAULT 0,
    cancelled_by INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX dep_nodes_graph ON dep_nodes (graph_id) WHERE graph_id <> 0;

-- The waiting jobs, for the counts per queue and state.
CREATE INDEX jobs_waiting ON jobs (queue, type) WHERE state = 8;
