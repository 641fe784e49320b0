package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// settling is the jobs a transaction made final, whose dependents it settles before COMMIT
// (store/deps.go). An id may be listed for a write that changed nothing (a repeated result):
// settling reads the job's state and each edge is settled once.
type settling struct {
	ids []int64
	now time.Time
	// changed are the waiting jobs the settling cancelled and the cancelled jobs a requeue
	// revived, for the broker's watches (store.DependentsChangedNotifier).
	changed []int64
}

func (s *settling) add(id int64, now time.Time) {
	s.ids = append(s.ids, id)
	if now.After(s.now) {
		s.now = now
	}
}

// OnDependentsReady has fn called after each commit that made waiting jobs ready or enqueued
// a batch's callbacks.
func (s *Store) OnDependentsReady(fn func()) { s.onReady.Store(&fn) }

func (s *Store) dependentsReady(n int) {
	if fn := s.onReady.Load(); n > 0 && fn != nil {
		(*fn)()
	}
}

// OnDependentsChanged has fn called after each commit that cancelled waiting jobs because a
// parent failed, or revived cancelled ones, with their ids.
func (s *Store) OnDependentsChanged(fn func(ids []int64)) { s.onChanged.Store(&fn) }

func (s *Store) dependentsChanged(ids []int64) {
	if fn := s.onChanged.Load(); len(ids) > 0 && fn != nil {
		(*fn)(ids)
	}
}

// idsJSON is ids as a JSON array, for json_each: one statement whatever their number.
func idsJSON(ids []int64) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// settledEdge is one edge whose parent is final, as settleDependents reads it.
type settledEdge struct {
	child, parent int64
	parentState   job.State
	runAnyway     bool
}

// settleDependents settles the dependents of the jobs the transaction made final, level by
// level, and returns how many it made ready.
func (t *tx) settleDependents() (int, error) {
	frontier, now := t.settle.ids, t.settle.now
	released := 0
	for len(frontier) > 0 {
		edges, err := t.finalEdges(frontier)
		if err != nil || len(edges) == 0 {
			return released, err
		}
		var next []int64
		for i := 0; i < len(edges); {
			j := i
			for j < len(edges) && edges[j].child == edges[i].child {
				j++
			}
			made, cancelled, err := t.settleChild(edges[i:j], now)
			if err != nil {
				return released, err
			}
			released += made
			if cancelled {
				next = append(next, edges[i].child)
			}
			i = j
		}
		t.settle.changed = append(t.settle.changed, next...)
		frontier = next
	}
	return released, nil
}

// finalEdges marks settled the unsettled edges of parents whose job is final, and returns them
// by child.
func (t *tx) finalEdges(parents []int64) ([]settledEdge, error) {
	arg := idsJSON(parents)
	rows, err := t.query(`SELECT d.child_id, d.parent_id, p.state, w.run_anyway
		FROM job_deps d JOIN jobs p ON p.id = d.parent_id JOIN dep_nodes w ON w.job_id = d.child_id
		WHERE d.parent_id IN (SELECT value FROM json_each(?)) AND d.settled = 0 AND p.state BETWEEN 5 AND 7
		ORDER BY d.child_id, d.parent_id`, arg)
	if err != nil {
		return nil, err
	}
	var edges []settledEdge
	for rows.Next() {
		var e settledEdge
		var st int
		if err := rows.Scan(&e.child, &e.parent, &st, &e.runAnyway); err != nil {
			rows.Close()
			return nil, err
		}
		e.parentState = job.State(st)
		edges = append(edges, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(edges) == 0 {
		return edges, err
	}
	_, err = t.exec(`UPDATE job_deps SET settled = 1 WHERE settled = 0
		AND parent_id IN (SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(?)) AND state BETWEEN 5 AND 7)`, arg)
	return edges, err
}

// settleChild applies edges, the newly settled edges of one child, to it: it makes the child
// ready when no parent is left, or cancels it when a parent failed and it does not run anyway.
func (t *tx) settleChild(edges []settledEdge, now time.Time) (released int, cancelled bool, err error) {
	child := edges[0].child
	var queue, typ string
	var st int
	var batch sql.NullInt64
	err = t.queryRow(`SELECT queue, type, state, batch_id FROM jobs WHERE id = ?`, child).Scan(&queue, &typ, &st, &batch)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && job.State(st) != job.StateWaiting) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	ok := 0
	var failed *settledEdge
	for i, e := range edges {
		if e.parentState == job.StateSucceeded || e.runAnyway {
			ok++
		} else if failed == nil {
			failed = &edges[i]
		}
	}
	if failed != nil {
		if _, err := t.exec(`UPDATE jobs SET state = 7, finished_at = ?, last_error_type = ?, last_error_message = ?
			WHERE id = ?`, nanos(now), store.ParentFailedType, store.ParentFailedMessage(failed.parent, failed.parentState), child); err != nil {
			return 0, false, err
		}
		if _, err := t.exec(`UPDATE dep_nodes SET cancelled_by = ?, parents_left = parents_left - ? WHERE job_id = ?`,
			failed.parent, ok, child); err != nil {
			return 0, false, err
		}
		// Its batch counts it as any cancel (flushBatches comes after settling).
		t.batches.Add(batch.Int64, child, now)
		return 0, true, t.addFinished(queue, typ, job.StateCancelled, 1)
	}
	var left int
	if err := t.queryRow(`UPDATE dep_nodes SET parents_left = parents_left - ? WHERE job_id = ? RETURNING parents_left`,
		ok, child).Scan(&left); err != nil {
		return 0, false, err
	}
	if left > 0 {
		return 0, false, nil
	}
	_, err = t.exec(`UPDATE jobs SET state = 2 WHERE id = ?`, child)
	return 1, false, err
}

func (t *tx) JobDepsAdd(ps []*store.JobDepsParams) ([]job.State, error) {
	out := make([]job.State, len(ps))
	for i, p := range ps {
		states, err := t.parentStates(p)
		if err != nil {
			return nil, err
		}
		left := 0
		for ord, parent := range p.Parents {
			st := states[parent]
			if _, err := t.exec(`INSERT INTO job_deps (parent_id, child_id, ord, settled) VALUES (?, ?, ?, ?)`,
				parent, p.Child, ord, st.Final()); err != nil {
				return nil, err
			}
			if !st.Final() {
				left++
			}
		}
		if _, err := t.exec(`INSERT INTO dep_nodes (job_id, parents_left, run_anyway, graph_id) VALUES (?, ?, ?, ?)`,
			p.Child, left, p.RunAnyway, p.Graph); err != nil {
			return nil, err
		}
		if left > 0 {
			out[i] = job.StateWaiting
		}
		if _, err := t.exec(`UPDATE jobs SET state = CASE WHEN ? THEN 8 ELSE state END, parents = ? WHERE id = ?`,
			left > 0, len(p.Parents), p.Child); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parentStates reads the states of p's parents, and refuses a parent that does not exist or
// that failed when p does not run anyway.
func (t *tx) parentStates(p *store.JobDepsParams) (map[int64]job.State, error) {
	states := make(map[int64]job.State, len(p.Parents))
	if len(p.Parents) == 0 {
		return states, nil
	}
	rows, err := t.query(`SELECT id, state FROM jobs WHERE id IN (SELECT value FROM json_each(?))`, idsJSON(p.Parents))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var st int
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		states[id] = job.State(st)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return states, store.CheckParents(p, states)
}

func (s *Store) JobDepsGet(ctx context.Context, id int64) (*store.JobDeps, error) {
	var out *store.JobDeps
	err := s.read(ctx, "job_deps_get", func(ctx context.Context) error {
		var err error
		out, err = depsOf(ctx, s.r, id)
		return err
	})
	return out, err
}

func (s *Store) ParentResults(ctx context.Context, id int64) ([]store.ParentInfo, error) {
	var out []store.ParentInfo
	err := s.read(ctx, "parent_results", func(ctx context.Context) error {
		var err error
		out, err = parentsOf(ctx, s.r, id)
		return err
	})
	return out, err
}

func (s *Store) GraphGet(ctx context.Context, graph int64) ([]*job.Job, map[int64]*store.JobDeps, error) {
	var jobs []*job.Job
	deps := map[int64]*store.JobDeps{}
	err := s.read(ctx, "graph_get", func(ctx context.Context) error {
		var err error
		jobs, err = queryJobList(ctx, s.r, `SELECT `+listColumns+` FROM jobs WHERE id IN
			(SELECT job_id FROM dep_nodes WHERE graph_id = ?) ORDER BY id`, graph)
		if err != nil {
			return err
		}
		clear(deps)
		return graphDeps(ctx, s.r, graph, deps)
	})
	if err == nil && len(jobs) == 0 {
		err = fmt.Errorf("graph %d: %w", graph, store.ErrNotFound)
	}
	return jobs, deps, err
}

// graphDeps reads the dependencies of every job of graph into deps, with three queries
// whatever the graph's size.
func graphDeps(ctx context.Context, db *sql.DB, graph int64, deps map[int64]*store.JobDeps) error {
	rows, err := db.QueryContext(ctx, `SELECT job_id, parents_left, run_anyway, graph_id, cancelled_by FROM dep_nodes WHERE graph_id = ?`, graph)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		d := &store.JobDeps{}
		if err := rows.Scan(&id, &d.ParentsLeft, &d.RunAnyway, &d.Graph, &d.CancelledBy); err != nil {
			rows.Close()
			return err
		}
		deps[id] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = db.QueryContext(ctx, `SELECT d.child_id, p.id, p.type, p.state FROM job_deps d
		JOIN dep_nodes w ON w.job_id = d.child_id JOIN jobs p ON p.id = d.parent_id
		WHERE w.graph_id = ? ORDER BY d.child_id, d.ord`, graph); err != nil {
		return err
	}
	for rows.Next() {
		var child int64
		var p store.ParentInfo
		var st int
		if err := rows.Scan(&child, &p.ID, &p.Type, &st); err != nil {
			rows.Close()
			return err
		}
		p.State = job.State(st)
		deps[child].Parents = append(deps[child].Parents, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = db.QueryContext(ctx, `SELECT d.parent_id, d.child_id FROM job_deps d
		JOIN dep_nodes w ON w.job_id = d.parent_id WHERE w.graph_id = ? ORDER BY d.parent_id, d.child_id`, graph); err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var parent, child int64
		if err := rows.Scan(&parent, &child); err != nil {
			return err
		}
		deps[parent].Dependents = append(deps[parent].Dependents, child)
	}
	return rows.Err()
}

// depsOf reads job id's dependencies with db.
func depsOf(ctx context.Context, db *sql.DB, id int64) (*store.JobDeps, error) {
	d := &store.JobDeps{}
	err := db.QueryRowContext(ctx, `SELECT parents_left, run_anyway, graph_id, cancelled_by FROM dep_nodes WHERE job_id = ?`, id).
		Scan(&d.ParentsLeft, &d.RunAnyway, &d.Graph, &d.CancelledBy)
	node := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if d.Parents, err = parentsOf(ctx, db, id); err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT child_id FROM job_deps WHERE parent_id = ? ORDER BY child_id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c int64
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		d.Dependents = append(d.Dependents, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !node && len(d.Dependents) == 0 {
		return nil, nil
	}
	return d, nil
}

// parentsOf reads job id's parents, in the order they were named, with db.
func parentsOf(ctx context.Context, db *sql.DB, id int64) ([]store.ParentInfo, error) {
	rows, err := db.QueryContext(ctx, `SELECT p.id, p.type, p.state, p.result FROM job_deps d JOIN jobs p ON p.id = d.parent_id
		WHERE d.child_id = ? ORDER BY d.ord`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, store.ScanParent)
}
