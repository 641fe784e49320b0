-- Dependencies between jobs (JobSpec.depends_on, EnqueueGraph): a job with parents waits in
-- state 8 (WAITING) until every parent SUCCEEDED, and is released (or cancelled, when a parent
-- goes DEAD or CANCELLED) by the transaction that makes its last parent final (deps.go).

-- How many parents a job has: the worker is sent their results (Assignment.parent_results)
-- only for a job that has some, read with the job's row so a lease needs no other read.
ALTER TABLE jobs ADD COLUMN parents integer NOT NULL DEFAULT 0;

-- One row per edge: child_id runs after parent_id. ord is the parent's place in the order the
-- producer named them; settled says the parent's final state was applied to the child, once.
CREATE TABLE job_deps (
    parent_id bigint  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    child_id  bigint  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    ord       integer NOT NULL,
    settled   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_deps_child ON job_deps (child_id, ord);

-- One row per job with parents or in a graph: parents not yet settled, what to do when a
-- parent fails, its graph (the id of the graph's first job; 0: none) and, for a job cancelled
-- because of a parent, that parent.
CREATE TABLE dep_nodes (
    job_id       bigint  PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    parents_left integer NOT NULL,
    run_anyway   boolean NOT NULL DEFAULT false,
    graph_id     bigint  NOT NULL DEFAULT 0,
    cancelled_by bigint  NOT NULL DEFAULT 0
);
CREATE INDEX dep_nodes_graph ON dep_nodes (graph_id) WHERE graph_id <> 0;

-- The waiting jobs, for the counts per queue and state.
CREATE INDEX jobs_waiting ON jobs (queue, type) WHERE state = 8;

-- jobwire_settle_dependents applies the final states of the jobs finals (those that are final)
-- to their dependents, once per edge: a dependent whose parents all SUCCEEDED (or ended at all,
-- for one that runs anyway) becomes PENDING; one whose parent went DEAD or CANCELLED is
-- CANCELLED, naming that parent, and its own dependents are settled in turn. Dependents are
-- locked in id order, level by level. When it made jobs ready it tells every broker (a ready
-- event on channel, sent at commit). It returns how many it made ready.
CREATE FUNCTION jobwire_settle_dependents(finals bigint[], now_ns bigint, channel text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    frontier bigint[] := finals;
    next     bigint[];
    released integer := 0;
    r        record;
    pstate   smallint;
    left_n   integer;
BEGIN
    WHILE frontier IS NOT NULL AND cardinality(frontier) > 0 LOOP
        next := '{}';
        FOR r IN
            WITH e AS (
                UPDATE job_deps d SET settled = true FROM jobs p
                WHERE d.parent_id = ANY (frontier) AND p.id = d.parent_id AND p.state IN (5, 6, 7)
                    AND NOT d.settled
                RETURNING d.child_id, d.parent_id, p.state AS pstate)
            SELECT e.child_id,
                   count(*) FILTER (WHERE e.pstate = 5 OR w.run_anyway) AS ok,
                   min(e.parent_id) FILTER (WHERE e.pstate <> 5 AND NOT w.run_anyway) AS failed
            FROM e JOIN dep_nodes w ON w.job_id = e.child_id
            GROUP BY e.child_id ORDER BY e.child_id
        LOOP
            PERFORM FROM jobs WHERE id = r.child_id AND state = 8 FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
            IF r.failed IS NOT NULL THEN
                SELECT state INTO pstate FROM jobs WHERE id = r.failed;
                UPDATE jobs SET state = 7, finished_at = now_ns, last_error_type = 'PARENT_FAILED',
                    last_error_message = format('parent job %s ended %s', r.failed,
                        CASE pstate WHEN 6 THEN 'DEAD' ELSE 'CANCELLED' END)
                    WHERE id = r.child_id;
                UPDATE dep_nodes SET cancelled_by = r.failed, parents_left = parents_left - r.ok
                    WHERE job_id = r.child_id;
                INSERT INTO finished_totals (queue, type, state, n)
                    SELECT queue, type, 7, 1 FROM jobs WHERE id = r.child_id
                    ON CONFLICT (queue, type, state) DO UPDATE SET n = finished_totals.n + 1;
                next := next || r.child_id;
            ELSE
                UPDATE dep_nodes SET parents_left = parents_left - r.ok WHERE job_id = r.child_id
                    RETURNING parents_left INTO left_n;
                IF left_n <= 0 THEN
                    UPDATE jobs SET state = 2 WHERE id = r.child_id;
                    released := released + 1;
                END IF;
            END IF;
        END LOOP;
        frontier := next;
    END LOOP;
    IF released > 0 THEN
        PERFORM pg_notify(channel, '{"k":"ready","f":"dependencies"}');
    END IF;
    RETURN released;
END
$$;
