package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// This file holds what operators use: the dead-letter queue, bulk actions, retention, queues
// and stats.

// querier is what both the pool and a transaction can run, so a query is written once for both.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// deadWhere appends the conditions of f (store.DeadJobFilter.Conds) to a query that already
// selects dead jobs.
func deadWhere(q *query, f *store.DeadJobFilter) {
	f.Conds(func(cond string, v any) { q.sql.WriteString(" AND " + cond + " " + q.arg(v)) })
}

func queryIDs(ctx context.Context, db querier, sql string, args ...any) ([]int64, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func getMany(ctx context.Context, db querier, ids []int64) ([]*job.Job, error) {
	jobs, err := scanJobs(db.Query(ctx, `SELECT `+listColumns+` FROM jobs WHERE id = ANY($1)`, ids))
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]*job.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	return store.InIDOrder(ids, byID), nil
}

func deadIDs(ctx context.Context, db querier, f *store.DeadJobFilter, limit int) ([]int64, error) {
	q := &query{}
	q.sql.WriteString(`SELECT id FROM jobs WHERE state = 6`)
	deadWhere(q, f)
	q.sql.WriteString(` ORDER BY finished_at DESC, id DESC LIMIT ` + q.arg(limit))
	return queryIDs(ctx, db, q.sql.String(), q.args...)
}

// JobListDead reads dead jobs in p.Order.
func (s *Store) JobListDead(ctx context.Context, p *store.DeadJobListParams) ([]*job.Job, error) {
	k, err := p.Order.Keyset(store.DeadSorts)
	if err != nil {
		return nil, err
	}
	q := &query{}
	q.sql.WriteString(`SELECT ` + listColumns + ` FROM jobs WHERE state = 6`)
	deadWhere(q, &p.Filter)
	keysetPage(q, k, p.After, p.Limit)
	var out []*job.Job
	err = s.read(ctx, "job_list_dead", func(ctx context.Context) error {
		var err error
		out, err = scanJobs(s.pool.Query(ctx, q.sql.String(), q.args...))
		return err
	})
	return out, err
}

// keysetPage appends to a query that has a WHERE clause the rows after the cursor in the order
// k, the ORDER BY and the LIMIT. The id breaks ties in the column's direction, so every job has
// one place in the order and a page continues exactly after the last. Text sorts byte-wise
// (COLLATE "C"), as SQLite's does, whatever the database's collation.
func keysetPage(q *query, k store.Keyset, after *store.ListCursor, limit int) {
	col := k.Column
	if k.Text {
		col += ` COLLATE "C"`
	}
	if after != nil {
		q.sql.WriteString(` AND (` + col + `, id) ` + k.After + ` (` + q.arg(k.Value(after)) + `, ` + q.arg(after.ID) + `)`)
	}
	q.sql.WriteString(` ORDER BY ` + col + ` ` + k.Dir + `, id ` + k.Dir + ` LIMIT ` + q.arg(limit))
}

// JobGetMany reads jobs in the order of ids.
func (s *Store) JobGetMany(ctx context.Context, ids []int64) ([]*job.Job, error) {
	var out []*job.Job
	err := s.read(ctx, "job_get_many", func(ctx context.Context) error {
		var err error
		out, err = getMany(ctx, s.pool, ids)
		return err
	})
	return out, err
}

// DeadErrorGroups groups dead jobs by last error type; the sample is the message of the
// group's newest job.
func (s *Store) DeadErrorGroups(ctx context.Context, f *store.DeadJobFilter, limit int) ([]store.DeadErrorGroup, error) {
	q := &query{}
	q.sql.WriteString(`SELECT DISTINCT ON (last_error_type) last_error_type, COUNT(*) OVER w, MAX(finished_at) OVER w,
		last_error_message FROM jobs WHERE state = 6`)
	deadWhere(q, f)
	q.sql.WriteString(` WINDOW w AS (PARTITION BY last_error_type) ORDER BY last_error_type, finished_at DESC, id DESC`)
	sql := `SELECT * FROM (` + q.sql.String() + `) g ORDER BY 2 DESC, 3 DESC, 1 LIMIT ` + q.arg(limit)
	var out []store.DeadErrorGroup
	err := s.read(ctx, "dead_error_groups", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, q.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var g store.DeadErrorGroup
			var last *int64
			if err := rows.Scan(&g.ErrorType, &g.Count, &last, &g.SampleMessage); err != nil {
				return err
			}
			g.LastSeen = fromNull(last)
			out = append(out, g)
		}
		return rows.Err()
	})
	return out, err
}

// QueueLoadAll reads every queue's settings.
func (s *Store) QueueLoadAll(ctx context.Context) ([]store.QueueRecord, error) {
	var out []store.QueueRecord
	err := s.read(ctx, "queue_load", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT name, paused, concurrency_limit FROM queues ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.QueueRecord
			if err := rows.Scan(&r.Name, &r.Paused, &r.ConcurrencyLimit); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// PausedReady counts the ready jobs of the paused queues, up to atMost: whether they hold a
// backlog a lease of every queue would read past (store.JobLeaseParams.PausedBacklog). It reads
// each paused queue's entries of jobs_ready_queue_type, at most atMost of them in all, so its
// cost follows neither the backlog nor the history.
func (s *Store) PausedReady(ctx context.Context, atMost int) (int, error) {
	var n int
	err := s.read(ctx, "paused_ready", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, pausedReadySQL, atMost).Scan(&n)
	})
	return n, err
}

// pausedReadySQL counts PausedReady's jobs, a paused queue at a time (a join the planner could
// turn around would read every ready job), each through its entries of jobs_ready_queue_type in
// the index's order, which a plain index scan stops reading at the limit, where a bitmap scan
// would read them all first. The queue is matched as a range: the planner guesses that an
// equality with a column matches half the ready jobs when the statistics know of two queues,
// and read jobs_ready_type past the other queues' jobs; it guesses a range of a parameter at a
// 200th of the rows, and the index's order spares it their sort.
const pausedReadySQL = `SELECT count(*) FROM (SELECT FROM queues CROSS JOIN LATERAL (
		SELECT FROM jobs WHERE jobs.state = 2 AND jobs.queue >= queues.name AND jobs.queue <= queues.name
		ORDER BY jobs.queue, jobs.type, jobs.priority DESC, jobs.run_at, jobs.id LIMIT $1) AS r
	WHERE queues.paused LIMIT $1) AS ready`

// The reads of the stats (JobCounts, QueueStats, RecentCounts) count the unfinished jobs through
// the partial indexes of their states and read the finished ones from their totals, so their cost
// follows the backlog, not the history. Each state, or pair of states, that a partial index holds
// is counted by a query of its own: no index answers state IN (1, 2, 3, 4), and the server read
// the whole table for it (5 ms beside 18,000 finished jobs, seconds beside millions). They are
// planned at each call (pgx.QueryExecModeExec), as ConcurrencyKeyed is: a plan kept from the
// empty table of a new database read the whole table too, and planning costs a stats read a
// fraction of a millisecond (TestStatsReadTheOpenJobsOnly).

// openStateGroups are the unfinished states by the partial index that holds them: jobs_scheduled,
// jobs_ready_queue, jobs_held_queue and jobs_waiting.
var openStateGroups = []string{"state = 1", "state = 2", "state IN (3, 4)", "state = 8"}

// byOpenState joins, with UNION ALL, the query part once for each of openStateGroups, the
// group's condition in place of STATE.
func byOpenState(part string) string {
	parts := make([]string, len(openStateGroups))
	for i, g := range openStateGroups {
		parts[i] = strings.ReplaceAll(part, "STATE", g)
	}
	return strings.Join(parts, "\n\tUNION ALL ")
}

// jobCountsSQL counts the jobs per queue, type and state (JobCounts).
var jobCountsSQL = byOpenState(`SELECT queue, type, state, COUNT(*) FROM jobs WHERE STATE GROUP BY queue, type, state`) + `
	UNION ALL SELECT queue, type, state, n FROM finished_totals WHERE n > 0
	ORDER BY 1, 2, 3`

// queueDepthSQL counts the jobs of the queue $1 (every queue when empty) per state (QueueStats).
var queueDepthSQL = byOpenState(`SELECT queue, state, COUNT(*) FROM jobs WHERE STATE AND ($1 = '' OR queue = $1) GROUP BY queue, state`) + `
	UNION ALL SELECT queue, state, SUM(n)::bigint FROM finished_totals WHERE n > 0 AND ($1 = '' OR queue = $1)
		GROUP BY queue, state`

// oldestReadySQL reads the run-at of the oldest ready job of the queue $1, or of every queue.
const oldestReadySQL = `SELECT queue, MIN(run_at) FROM jobs WHERE state = 2 AND ($1 = '' OR queue = $1) GROUP BY queue`

// recentCountsSQL counts the failed attempts ($2, $3, $4 the outcomes that count) and the jobs
// that succeeded and died since $1, through attempts_finished and jobs_finished.
const recentCountsSQL = `SELECT
	(SELECT COUNT(*) FROM attempts WHERE finished_at >= $1 AND outcome IN ($2, $3, $4)),
	(SELECT COUNT(*) FROM jobs WHERE state = 5 AND finished_at >= $1),
	(SELECT COUNT(*) FROM jobs WHERE state = 6 AND finished_at >= $1)`

// QueueStats reads queues with their depth per state and oldest ready job. Unfinished jobs are
// counted through the partial indexes, finished ones read from their totals.
func (s *Store) QueueStats(ctx context.Context, name string) ([]store.QueueStats, error) {
	var out []store.QueueStats
	err := s.read(ctx, "queue_stats", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT name, paused, concurrency_limit FROM queues
			WHERE $1 = '' OR name = $1 ORDER BY name`, name)
		if err != nil {
			return err
		}
		for rows.Next() {
			var q store.QueueStats
			if err := rows.Scan(&q.Name, &q.Paused, &q.ConcurrencyLimit); err != nil {
				rows.Close()
				return err
			}
			q.Depth = map[job.State]int64{}
			out = append(out, q)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		byName := map[string]*store.QueueStats{}
		for i := range out {
			byName[out[i].Name] = &out[i]
		}
		rows, err = s.pool.Query(ctx, queueDepthSQL, pgx.QueryExecModeExec, name)
		if err != nil {
			return err
		}
		for rows.Next() {
			var queue string
			var state int16
			var n int64
			if err := rows.Scan(&queue, &state, &n); err != nil {
				rows.Close()
				return err
			}
			if q := byName[queue]; q != nil {
				q.Depth[job.State(state)] = n
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = s.pool.Query(ctx, oldestReadySQL, pgx.QueryExecModeExec, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var queue string
			var at int64
			if err := rows.Scan(&queue, &at); err != nil {
				return err
			}
			if q := byName[queue]; q != nil {
				q.OldestReadyAt = fromNanos(at)
			}
		}
		return rows.Err()
	})
	return out, err
}

// JobCounts counts jobs per queue, type and state.
func (s *Store) JobCounts(ctx context.Context) ([]store.StateCount, error) {
	var out []store.StateCount
	err := s.read(ctx, "job_counts", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, jobCountsSQL, pgx.QueryExecModeExec)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.StateCount
			var state int16
			if err := rows.Scan(&c.Queue, &c.Type, &state, &c.Count); err != nil {
				return err
			}
			c.State = job.State(state)
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

// RecentCounts counts finished attempts by outcome, and jobs that died, since a time.
func (s *Store) RecentCounts(ctx context.Context, since time.Time) (store.RecentCounts, error) {
	var out store.RecentCounts
	err := s.read(ctx, "recent_counts", func(ctx context.Context) error {
		// Successful attempts have no attempts row (see tx.JobFinish): they are the jobs that
		// finished SUCCEEDED.
		return s.pool.QueryRow(ctx, recentCountsSQL, pgx.QueryExecModeExec,
			nanos(since), int16(job.OutcomeFailed), int16(job.OutcomeLeaseExpired), int16(job.OutcomeTimeout)).
			Scan(&out.Failed, &out.Succeeded, &out.Dead)
	})
	return out, err
}

func (t *tx) JobDeadIDs(f *store.DeadJobFilter, limit int) ([]int64, error) {
	return deadIDs(t.ctx, t.tx, f, limit)
}

func (t *tx) JobStates(ids []int64) (map[int64]job.State, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT id, state FROM jobs WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int64]job.State, len(ids))
	for rows.Next() {
		var id int64
		var st int16
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = job.State(st)
	}
	return out, rows.Err()
}

func (t *tx) JobGetMany(ids []int64) ([]*job.Job, error) { return getMany(t.ctx, t.tx, ids) }

func (t *tx) JobRequeue(p *store.JobRequeueParams) (int, error) {
	state := job.StatePending
	if p.RunAt.After(p.Now) {
		state = job.StateScheduled
	}
	var priority *int32
	if p.Priority != nil {
		v := int32(*p.Priority)
		priority = &v
	}
	// The dead jobs are locked first, in id order (lockorder.go), by the first statement.
	if _, err := t.exec(requeueUniqueSQL, p.IDs); err != nil {
		return 0, err
	}
	rows, err := t.tx.Query(t.ctx, `WITH locked AS MATERIALIZED (
			SELECT id, batch_counted FROM jobs WHERE state = 6 AND id = ANY($6) ORDER BY id FOR NO KEY UPDATE)
		UPDATE jobs SET state = $1, run_at = $2, requeued_at = $3,
		priority = COALESCE($4, priority), payload = COALESCE($5, payload), batch_counted = false,
		attempt_base = attempt_base + attempts, attempts = 0, dead_reason = 0, finished_at = NULL,
		lease_expires_at = NULL, attempt_deadline = NULL, started_at = NULL, worker_id = ''
		FROM locked WHERE jobs.id = locked.id AND jobs.state = 6
		RETURNING jobs.id, jobs.queue, jobs.type, CASE WHEN locked.batch_counted THEN jobs.batch_id ELSE 0 END`,
		int16(state), nanos(p.RunAt), nanos(p.Now), priority, p.Payload, p.IDs)
	if err != nil {
		return 0, err
	}
	requeued, err := t.leaveCounts(rows, job.StateDead)
	if err != nil {
		return 0, err
	}
	return len(requeued), t.reviveDependents(requeued)
}

// leaveCounts reads rows of jobs (id, queue, type, and the batch that counted them or 0) that
// were final in state and are no longer: they leave the finished totals, written with the
// transaction's other changes to them (totals.go), and their batches' counts, where the
// transaction's writes end (flushBatches): they are counted again when they are final. It
// returns their ids.
func (t *tx) leaveCounts(rows pgx.Rows, state job.State) ([]int64, error) {
	var ids []int64
	var id, batch int64
	var queue, typ string
	_, err := pgx.ForEachRow(rows, []any{&id, &queue, &typ, &batch}, func() error {
		ids = append(ids, id)
		t.batches.Uncount(batch, state)
		return t.addFinished(queue, typ, state, -1)
	})
	return ids, err
}

// reviveSQL brings back, as WAITING, the dependents that the jobs $1 cancelled when they
// failed (dep_nodes.cancelled_by) and that no other parent holds cancelled (DEAD or CANCELLED),
// locked in id order; it returns them as leaveCounts reads them.
const reviveSQL = `WITH locked AS MATERIALIZED (
		SELECT j.id, j.batch_counted FROM job_deps e
		JOIN dep_nodes w ON w.job_id = e.child_id AND w.cancelled_by = e.parent_id
		JOIN jobs j ON j.id = e.child_id
		WHERE e.parent_id = ANY($1) AND j.state = 7
			AND NOT EXISTS (SELECT 1 FROM job_deps d JOIN jobs p ON p.id = d.parent_id
				WHERE d.child_id = j.id AND p.state IN (6, 7))
		ORDER BY j.id FOR NO KEY UPDATE OF j)
	UPDATE jobs SET state = 8, finished_at = NULL, last_error_type = '', last_error_message = '', batch_counted = false
	FROM locked WHERE jobs.id = locked.id AND jobs.state = 7
	RETURNING jobs.id, jobs.queue, jobs.type, CASE WHEN locked.batch_counted THEN jobs.batch_id ELSE 0 END`

// reviveDependents brings back the dependents that the jobs parents, requeued, cancelled
// when they failed (store.Tx.JobRequeue), level by level: their edges are settled again by
// their parents' states (a SUCCEEDED parent stays done), and they wait for the others.
func (t *tx) reviveDependents(parents []int64) error {
	for frontier := parents; len(frontier) > 0; {
		rows, err := t.tx.Query(t.ctx, reviveSQL, frontier)
		if err != nil {
			return err
		}
		if frontier, err = t.leaveCounts(rows, job.StateCancelled); err != nil || len(frontier) == 0 {
			return err
		}
		t.settle.changed = append(t.settle.changed, frontier...)
		for _, e := range store.JobEvents(frontier) { // for the other brokers' watches
			t.Publish(e)
		}
		if _, err := t.exec(`UPDATE job_deps d SET settled = (p.state = 5) FROM jobs p
			WHERE d.child_id = ANY($1) AND p.id = d.parent_id`, frontier); err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE dep_nodes w SET cancelled_by = 0, parents_left = (SELECT count(*) FROM job_deps d
				JOIN jobs p ON p.id = d.parent_id WHERE d.child_id = w.job_id AND p.state <> 5)
			WHERE w.job_id = ANY($1)`, frontier); err != nil {
			return err
		}
	}
	return nil
}

// requeueUniqueSQL locks the dead jobs $1 in id order and takes the unique key off those that
// could not hold it once requeued (see store.Tx.JobRequeue): another job holds it, or a dead
// job of $1 with a smaller id keeps it.
const requeueUniqueSQL = `WITH locked AS MATERIALIZED (
		SELECT id FROM jobs WHERE state = 6 AND id = ANY($1) ORDER BY id FOR NO KEY UPDATE)
	UPDATE jobs SET unique_key = NULL FROM locked WHERE jobs.id = locked.id AND jobs.unique_key IS NOT NULL
		AND (EXISTS (SELECT 1 FROM jobs o WHERE o.unique_key = jobs.unique_key AND o.id <> jobs.id
				AND (o.unique_states >> o.state) & 1 = 1)
			OR EXISTS (SELECT 1 FROM jobs o WHERE o.unique_key = jobs.unique_key AND o.id < jobs.id
				AND o.state = 6 AND o.id = ANY($1)))`

func (t *tx) JobDeleteDead(ids []int64) (int, error) {
	return t.deleteJobs(`SELECT id FROM jobs WHERE state = 6 AND id = ANY($1) ORDER BY id FOR UPDATE`, ids)
}

func (t *tx) JobDeleteFinished(p *store.JobDeleteFinishedParams) (int, error) {
	if len(p.States) == 0 || p.Limit <= 0 {
		return 0, nil
	}
	states := make([]int16, len(p.States))
	for i, st := range p.States {
		states[i] = int16(st)
	}
	// The oldest finished jobs, picked first (an array, read once, through jobs_finished), then
	// locked in id order (lockorder.go) through the primary key; the condition is the lock's
	// too, checked again on a job changed while the lock waited.
	return t.deleteJobs(`SELECT id FROM jobs WHERE id = ANY(ARRAY(SELECT id FROM jobs
			WHERE state = ANY($1) AND finished_at < $2 ORDER BY finished_at LIMIT $3))
		AND state = ANY($1) AND finished_at < $2 ORDER BY id FOR UPDATE`, states, nanos(p.FinishedBefore), p.Limit)
}

func (t *tx) QueueSetPaused(name string, paused bool) error {
	if err := t.queueChanging(); err != nil {
		return err
	}
	if !paused {
		return t.updateQueue(`UPDATE queues SET paused = false WHERE name = $1`, name)
	}
	_, err := t.exec(`INSERT INTO queues (name, paused) VALUES ($1, true)
		ON CONFLICT (name) DO UPDATE SET paused = excluded.paused`, name)
	return err
}

func (t *tx) QueueSetLimit(name string, limit int) error {
	if err := t.queueChanging(); err != nil {
		return err
	}
	return t.updateQueue(`UPDATE queues SET concurrency_limit = $2 WHERE name = $1`, name, limit)
}

// updateQueue runs an update of one queue's row, named by the first argument; no row is
// ErrNotFound.
func (t *tx) updateQueue(sql string, args ...any) error {
	n, err := t.exec(sql, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("queue %q: %w", args[0], store.ErrNotFound)
	}
	return nil
}
