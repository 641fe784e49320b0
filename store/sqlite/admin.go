package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// This file holds what operators use: the dead-letter queue, bulk actions, retention, queues
// and stats. Reads run on the reader pool; writes are Tx methods the broker calls through its
// writer.

// querier is what both the reader pool and a write transaction can run, so a query is written
// once for both.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// idChunk bounds the ids bound into one statement, well under SQLite's variable limit.
const idChunk = 500

// deadWhere appends the conditions of f (store.DeadJobFilter.Conds) to a query that already
// has a WHERE clause selecting dead jobs, and their values to args.
func deadWhere(q *strings.Builder, args []any, f *store.DeadJobFilter) []any {
	f.Conds(func(cond string, v any) {
		q.WriteString(" AND " + cond + " ?")
		args = append(args, v)
	})
	return args
}

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func idArgs(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// chunks calls fn with ids in slices of at most idChunk.
func chunks(ids []int64, fn func(part []int64) error) error {
	for len(ids) > 0 {
		n := min(len(ids), idChunk)
		if err := fn(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func queryJobList(ctx context.Context, db querier, q string, args ...any) ([]*job.Job, error) {
	return scanJobs(db.QueryContext(ctx, q, args...))
}

func queryIDs(ctx context.Context, db querier, q string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

func getMany(ctx context.Context, db querier, ids []int64) ([]*job.Job, error) {
	byID := make(map[int64]*job.Job, len(ids))
	err := chunks(ids, func(part []int64) error {
		jobs, err := queryJobList(ctx, db, `SELECT `+listColumns+` FROM jobs WHERE id IN (`+placeholders(len(part))+`)`, idArgs(part)...)
		for _, j := range jobs {
			byID[j.ID] = j
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return store.InIDOrder(ids, byID), nil
}

func deadIDs(ctx context.Context, db querier, f *store.DeadJobFilter, limit int) ([]int64, error) {
	var q strings.Builder
	q.WriteString(`SELECT id FROM jobs WHERE state = 6`)
	args := deadWhere(&q, nil, f)
	q.WriteString(` ORDER BY finished_at DESC, id DESC LIMIT ?`)
	return queryIDs(ctx, db, q.String(), append(args, limit)...)
}

// JobListDead reads dead jobs in p.Order.
func (s *Store) JobListDead(ctx context.Context, p *store.DeadJobListParams) ([]*job.Job, error) {
	k, err := p.Order.Keyset(store.DeadSorts)
	if err != nil {
		return nil, err
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + listColumns + ` FROM jobs WHERE state = 6`)
	args := deadWhere(&q, nil, &p.Filter)
	args = keysetPage(&q, args, k, p.After, p.Limit)
	var out []*job.Job
	err = s.read(ctx, "job_list_dead", func(ctx context.Context) error {
		var err error
		out, err = queryJobList(ctx, s.r, q.String(), args...)
		return err
	})
	return out, err
}

// keysetPage appends to a query that has a WHERE clause the rows after the cursor in the order
// k, the ORDER BY and the LIMIT, and their values to args. The id breaks ties in the column's
// direction, so every job has one place in the order and a page continues exactly after the last.
func keysetPage(q *strings.Builder, args []any, k store.Keyset, after *store.ListCursor, limit int) []any {
	if after != nil {
		q.WriteString(` AND (` + k.Column + `, id) ` + k.After + ` (?, ?)`)
		args = append(args, k.Value(after), after.ID)
	}
	q.WriteString(` ORDER BY ` + k.Column + ` ` + k.Dir + `, id ` + k.Dir + ` LIMIT ?`)
	return append(args, limit)
}

// JobGetMany reads jobs in the order of ids.
func (s *Store) JobGetMany(ctx context.Context, ids []int64) ([]*job.Job, error) {
	var out []*job.Job
	err := s.read(ctx, "job_get_many", func(ctx context.Context) error {
		var err error
		out, err = getMany(ctx, s.r, ids)
		return err
	})
	return out, err
}

// DeadErrorGroups groups dead jobs by last error type.
func (s *Store) DeadErrorGroups(ctx context.Context, f *store.DeadJobFilter, limit int) ([]store.DeadErrorGroup, error) {
	var q strings.Builder
	q.WriteString(`SELECT last_error_type, COUNT(*), MAX(finished_at) FROM jobs WHERE state = 6`)
	args := deadWhere(&q, nil, f)
	q.WriteString(` GROUP BY last_error_type ORDER BY COUNT(*) DESC, MAX(finished_at) DESC, last_error_type LIMIT ?`)
	args = append(args, limit)
	var out []store.DeadErrorGroup
	err := s.read(ctx, "dead_error_groups", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var g store.DeadErrorGroup
			var last sql.NullInt64
			if err := rows.Scan(&g.ErrorType, &g.Count, &last); err != nil {
				return err
			}
			g.LastSeen = fromNull(last)
			out = append(out, g)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// The sample is the message of the group's newest job.
		for i := range out {
			var sq strings.Builder
			sq.WriteString(`SELECT last_error_message FROM jobs WHERE state = 6 AND last_error_type = ?`)
			sargs := deadWhere(&sq, []any{out[i].ErrorType}, f)
			sq.WriteString(` ORDER BY finished_at DESC, id DESC LIMIT 1`)
			if err := s.r.QueryRowContext(ctx, sq.String(), sargs...).Scan(&out[i].SampleMessage); err != nil && err != sql.ErrNoRows {
				return err
			}
		}
		return nil
	})
	return out, err
}

// QueueLoadAll reads every queue's settings.
func (s *Store) QueueLoadAll(ctx context.Context) ([]store.QueueRecord, error) {
	var out []store.QueueRecord
	err := s.read(ctx, "queue_load", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, `SELECT name, paused, concurrency_limit FROM queues ORDER BY name`)
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

// PausedReady counts the ready jobs of the paused queues, up to atMost, each paused queue's
// through its entries of jobs_ready_queue_type.
func (s *Store) PausedReady(ctx context.Context, atMost int) (int, error) {
	var n int
	err := s.read(ctx, "paused_ready", func(ctx context.Context) error {
		return s.r.QueryRowContext(ctx, pausedReadySQL, atMost).Scan(&n)
	})
	return n, err
}

// pausedReadySQL counts PausedReady's jobs, a paused queue at a time: the CROSS JOIN keeps
// queues the outer loop, where SQLite chose to read every ready job and look each one's queue up.
const pausedReadySQL = `SELECT count(*) FROM (SELECT 1 FROM queues
	CROSS JOIN jobs INDEXED BY jobs_ready_queue_type ON jobs.queue = queues.name AND jobs.state = 2
	WHERE queues.paused LIMIT ?)`

// QueueStats reads queues with their depth per state and oldest ready job.
func (s *Store) QueueStats(ctx context.Context, name string) ([]store.QueueStats, error) {
	where, args := "", []any{}
	if name != "" {
		where, args = " WHERE name = ?", []any{name}
	}
	var out []store.QueueStats
	err := s.read(ctx, "queue_stats", func(ctx context.Context) error {
		out = out[:0]
		byName := map[string]*store.QueueStats{}
		rows, err := s.r.QueryContext(ctx, `SELECT name, paused, concurrency_limit FROM queues`+where+` ORDER BY name`, args...)
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
		for i := range out {
			byName[out[i].Name] = &out[i]
		}
		// As in JobCounts, the cost follows the backlog, not the history.
		qand := strings.Replace(strings.Replace(where, "WHERE", "AND", 1), "name", "queue", 1)
		depthArgs := slices.Concat(args, args, args, args) // one set per part of the union
		rows, err = s.r.QueryContext(ctx, `SELECT queue, state, COUNT(*) FROM jobs WHERE state = 1`+qand+`
				GROUP BY queue, state
			UNION ALL
			SELECT queue, state, COUNT(*) FROM jobs WHERE state = 8`+qand+`
				GROUP BY queue, state
			UNION ALL
			SELECT queue, state, COUNT(*) FROM jobs WHERE `+openState+qand+` GROUP BY queue, state
			UNION ALL
			SELECT queue, state, SUM(n) FROM finished_totals WHERE n > 0`+qand+` GROUP BY queue, state`,
			depthArgs...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var queue string
			var state int
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
		rwhere := " WHERE " + openState + " AND state = 2" + qand
		rows, err = s.r.QueryContext(ctx, `SELECT queue, MIN(run_at) FROM jobs`+rwhere+` GROUP BY queue`, args...)
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
		// Unfinished jobs are counted through the partial indexes, finished ones read from
		// their totals (migration 004): the cost follows the backlog, not the history.
		rows, err := s.r.QueryContext(ctx, `SELECT queue, type, state, COUNT(*) FROM jobs WHERE state = 1
				GROUP BY queue, type, state
			UNION ALL
			SELECT queue, type, state, COUNT(*) FROM jobs WHERE state = 8
				GROUP BY queue, type, state
			UNION ALL
			SELECT queue, type, state, COUNT(*) FROM jobs WHERE `+openState+`
				GROUP BY queue, type, state
			UNION ALL
			SELECT queue, type, state, n FROM finished_totals WHERE n > 0
			ORDER BY 1, 2, 3`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.StateCount
			var state int
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
		out = store.RecentCounts{}
		// Successful attempts have no attempts row (see tx.JobFinish): they are the jobs that
		// finished SUCCEEDED.
		err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM attempts WHERE finished_at >= ? AND outcome IN (?, ?, ?)`,
			nanos(since), int(job.OutcomeFailed), int(job.OutcomeLeaseExpired), int(job.OutcomeTimeout)).Scan(&out.Failed)
		if err != nil {
			return err
		}
		return s.r.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN state = 5 THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 6 THEN 1 ELSE 0 END), 0)
			FROM jobs WHERE `+finishedState+` AND state IN (5, 6) AND finished_at >= ?`,
			nanos(since)).Scan(&out.Succeeded, &out.Dead)
	})
	return out, err
}

func (t *tx) JobDeadIDs(f *store.DeadJobFilter, limit int) ([]int64, error) {
	return deadIDs(t.ctx, t.cache.conn, f, limit)
}

func (t *tx) JobStates(ids []int64) (map[int64]job.State, error) {
	out := make(map[int64]job.State, len(ids))
	err := chunks(ids, func(part []int64) error {
		rows, err := t.query(`SELECT id, state FROM jobs WHERE id IN (`+placeholders(len(part))+`)`, idArgs(part)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var st int
			if err := rows.Scan(&id, &st); err != nil {
				return err
			}
			out[id] = job.State(st)
		}
		return rows.Err()
	})
	return out, err
}

func (t *tx) JobGetMany(ids []int64) ([]*job.Job, error) { return getMany(t.ctx, t.cache.conn, ids) }

func (t *tx) JobRequeue(p *store.JobRequeueParams) (int, error) {
	state := job.StatePending
	if p.RunAt.After(p.Now) {
		state = job.StateScheduled
	}
	var priority sql.NullInt64
	if p.Priority != nil {
		priority = sql.NullInt64{Int64: int64(*p.Priority), Valid: true}
	}
	var payload any // nil keeps the job's own
	if p.Payload != nil {
		payload = p.Payload
	}
	var requeued []int64
	err := chunks(p.IDs, func(part []int64) error {
		// The dead jobs leave the finished totals (migration 004).
		if _, err := t.exec(`INSERT INTO finished_totals (queue, type, state, n)
			SELECT queue, type, 6, -COUNT(*) FROM jobs WHERE state = 6 AND id IN (`+placeholders(len(part))+`)
			GROUP BY queue, type
			ON CONFLICT (queue, type, state) DO UPDATE SET n = n + excluded.n`, idArgs(part)...); err != nil {
			return err
		}
		// Another job may hold a requeued job's unique key, or a job of this requeue with a
		// smaller id keep it (see store.Tx.JobRequeue): its key is taken off.
		if _, err := t.exec(`UPDATE jobs SET unique_key = NULL WHERE state = 6 AND id IN (`+placeholders(len(part))+`)
			AND unique_key IS NOT NULL
			AND (EXISTS (SELECT 1 FROM jobs o WHERE o.unique_key = jobs.unique_key AND o.id <> jobs.id
					AND (o.unique_states >> o.state) & 1 = 1)
				OR EXISTS (SELECT 1 FROM jobs o WHERE o.unique_key = jobs.unique_key AND o.id < jobs.id
					AND o.state = 6 AND o.id IN (`+placeholders(len(part))+`)))`, append(idArgs(part), idArgs(part)...)...); err != nil {
			return err
		}
		// A batch's dead job leaves its batch's dead count, to be counted again when it is
		// final (store/batches.go).
		if _, err := t.exec(`UPDATE batches SET dead = dead - (SELECT COUNT(*) FROM jobs
				WHERE jobs.batch_id = batches.id AND state = 6 AND batch_counted = 1 AND id IN (`+placeholders(len(part))+`))
			WHERE id IN (SELECT batch_id FROM jobs WHERE state = 6 AND batch_counted = 1 AND id IN (`+placeholders(len(part))+`))`,
			append(idArgs(part), idArgs(part)...)...); err != nil {
			return err
		}
		args := append([]any{int(state), nanos(p.RunAt), nanos(p.Now), priority, payload}, idArgs(part)...)
		rows, err := t.query(`UPDATE jobs SET state = ?, run_at = ?, requeued_at = ?,
			priority = COALESCE(?, priority), payload = COALESCE(?, payload), batch_counted = 0,
			attempt_base = attempt_base + attempts, attempts = 0, dead_reason = 0, finished_at = NULL,
			lease_expires_at = NULL, attempt_deadline = NULL, started_at = NULL, worker_id = ''
			WHERE state = 6 AND id IN (`+placeholders(len(part))+`) RETURNING id`, args...)
		if err != nil {
			return err
		}
		got, err := store.CollectRows(rows, scanID)
		requeued = append(requeued, got...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return len(requeued), t.reviveDependents(requeued)
}

func scanID(r store.Scanner) (int64, error) {
	var id int64
	return id, r.Scan(&id)
}

// reviveDependents brings back the dependents that the jobs parents, requeued, cancelled
// when they failed (store.Tx.JobRequeue), level by level.
func (t *tx) reviveDependents(parents []int64) error {
	for frontier := parents; len(frontier) > 0; {
		rows, err := t.query(`SELECT j.id, j.queue, j.type, j.batch_id, j.batch_counted
			FROM job_deps e JOIN dep_nodes w ON w.job_id = e.child_id AND w.cancelled_by = e.parent_id
			JOIN jobs j ON j.id = e.child_id
			WHERE e.parent_id IN (SELECT value FROM json_each(?)) AND j.state = 7
			AND NOT EXISTS (SELECT 1 FROM job_deps d JOIN jobs p ON p.id = d.parent_id
				WHERE d.child_id = j.id AND p.state IN (6, 7))
			ORDER BY j.id`, idsJSON(frontier))
		if err != nil {
			return err
		}
		revived, err := store.CollectRows(rows, func(r store.Scanner) (revivedJob, error) {
			var j revivedJob
			var batch sql.NullInt64
			err := r.Scan(&j.id, &j.queue, &j.typ, &batch, &j.counted)
			j.batch = batch.Int64
			return j, err
		})
		if err != nil {
			return err
		}
		frontier = frontier[:0:0]
		for _, j := range revived {
			frontier = append(frontier, j.id)
			if err := t.addFinished(j.queue, j.typ, job.StateCancelled, -1); err != nil {
				return err
			}
			if j.counted && j.batch != 0 {
				if _, err := t.exec(`UPDATE batches SET cancelled = cancelled - 1 WHERE id = ?`, j.batch); err != nil {
					return err
				}
			}
		}
		if len(frontier) == 0 {
			return nil
		}
		t.settle.changed = append(t.settle.changed, frontier...)
		arg := idsJSON(frontier)
		if _, err := t.exec(`UPDATE jobs SET state = 8, finished_at = NULL, last_error_type = '', last_error_message = '',
			batch_counted = 0 WHERE id IN (SELECT value FROM json_each(?))`, arg); err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE job_deps SET settled = (SELECT state = 5 FROM jobs WHERE jobs.id = job_deps.parent_id)
			WHERE child_id IN (SELECT value FROM json_each(?))`, arg); err != nil {
			return err
		}
		if _, err := t.exec(`UPDATE dep_nodes SET cancelled_by = 0, parents_left = (SELECT COUNT(*) FROM job_deps d
				JOIN jobs p ON p.id = d.parent_id WHERE d.child_id = dep_nodes.job_id AND p.state <> 5)
			WHERE job_id IN (SELECT value FROM json_each(?))`, arg); err != nil {
			return err
		}
	}
	return nil
}

// revivedJob is a dependent reviveDependents brings back.
type revivedJob struct {
	id, batch  int64
	queue, typ string
	counted    bool
}

func (t *tx) JobDeleteDead(ids []int64) (int, error) {
	total := 0
	err := chunks(ids, func(part []int64) error {
		n, err := t.deleteJobs(`state = 6 AND id IN (`+placeholders(len(part))+`)`, idArgs(part)...)
		total += n
		return err
	})
	return total, err
}

func (t *tx) JobDeleteFinished(p *store.JobDeleteFinishedParams) (int, error) {
	if len(p.States) == 0 || p.Limit <= 0 {
		return 0, nil
	}
	args := make([]any, 0, len(p.States)+2)
	for _, st := range p.States {
		args = append(args, int(st))
	}
	args = append(args, nanos(p.FinishedBefore), p.Limit)
	return t.deleteJobs(`id IN (SELECT id FROM jobs WHERE state IN (`+placeholders(len(p.States))+`)
		AND finished_at < ? ORDER BY finished_at LIMIT ?)`, args...)
}

// deleteJobs deletes the jobs matching where, attempts first: the schema cascades too, but
// saying it keeps the statement correct on a database that does not enforce foreign keys.
func (t *tx) deleteJobs(where string, args ...any) (int, error) {
	if _, err := t.exec(`DELETE FROM attempts WHERE job_id IN (SELECT id FROM jobs WHERE `+where+`)`, args...); err != nil {
		return 0, err
	}
	n, err := t.exec(`DELETE FROM jobs WHERE `+where, args...)
	return int(n), err
}

func (t *tx) QueueSetPaused(name string, paused bool) error {
	if !paused {
		return t.updateQueue(`UPDATE queues SET paused = 0 WHERE name = ?`, name)
	}
	_, err := t.exec(`INSERT INTO queues (name, paused) VALUES (?, 1)
		ON CONFLICT (name) DO UPDATE SET paused = excluded.paused`, name)
	return err
}

func (t *tx) QueueSetLimit(name string, limit int) error {
	return t.updateQueue(`UPDATE queues SET concurrency_limit = ? WHERE name = ?`, limit, name)
}

// updateQueue runs an update of one queue's row, named by the last argument; no row is
// ErrNotFound.
func (t *tx) updateQueue(query string, args ...any) error {
	n, err := t.exec(query, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("queue %q: %w", args[len(args)-1], store.ErrNotFound)
	}
	return nil
}
