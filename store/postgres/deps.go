package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// settling is the jobs a transaction made final, whose dependents it settles before COMMIT
// (store/deps.go) with jobwire_settle_dependents (migrations 016, 019). An id may be listed for a
// write that changed nothing (a repeated result, a success whose lease was stale): the
// function reads the job's state, and settles each edge once.
type settling struct {
	ids []int64
	// failed are the ids made DEAD or CANCELLED: only they may cancel dependents, which their
	// batches count (flushBatches).
	failed   []int64
	now      time.Time
	released int // how many jobs it made ready, once the answer came
	// changed are the waiting jobs it cancelled, once the answer came, and the cancelled jobs
	// a requeue revived, for the broker's watches (store.DependentsChangedNotifier).
	changed []int64
}

func (s *settling) add(id int64, now time.Time) {
	s.ids = append(s.ids, id)
	if now.After(s.now) {
		s.now = now
	}
}

// addFailed notes a job made DEAD or CANCELLED.
func (s *settling) addFailed(id int64, now time.Time) {
	s.add(id, now)
	s.failed = append(s.failed, id)
}

// settleDependents settles the dependents of the jobs the transaction made final. It goes
// with COMMIT, after every write of the transaction's jobs (the successes' statement too, which
// may go with COMMIT itself), so it sees them all. It locks the dependents it changes, waiting
// jobs, in id order level by level: the only other writers of a waiting job are a cancel and
// another transaction's settling, so it closes no cycle with the writes of leases. The
// function tells every broker (a ready event) when it made jobs ready; the store tells its own
// broker too (OnDependentsReady), for one that is not in a cluster and does not listen. The
// jobs it cancelled come back in its answer, for the broker's own watches, and the function
// tells the other brokers of them (an EventJob from broker); cancelling none, it sends no more.
func (t *tx) settleDependents(channel, broker string) error {
	defer t.frontSafe()()
	if len(t.settle.ids) == 0 {
		return nil
	}
	read := func(rows pgx.Rows) (settled, error) {
		all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (settled, error) {
			var s settled
			return s, row.Scan(&s.released, &s.cancelled)
		})
		if err != nil || len(all) == 0 {
			return settled{}, err // no row: no edge was left to settle
		}
		return all[0], nil
	}
	return runRows(t, true, settleSQL,
		[]any{t.settle.ids, nanos(t.settle.now), channel, broker}, read, func(s settled, err error) {
			if err == nil {
				t.settle.released = int(s.released)
				if s.cancelled.Valid {
					t.settle.changed = append(t.settle.changed, store.JobEventIDsOf(s.cancelled.String)...)
				}
			}
		})
}

// settled is jobwire_settle_dependents' answer: how many jobs it made ready, and the ids of
// those it cancelled, comma-separated (NULL: none).
type settled struct {
	released  int32
	cancelled pgtype.Text
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

func (t *tx) JobDepsAdd(ps []*store.JobDepsParams) ([]job.State, error) {
	states, err := t.parentStates(ps)
	if err != nil {
		return nil, err
	}
	// Four statements whatever the number of jobs: a graph of thousands is one short write.
	var e depEdges
	var n depNodes
	out := make([]job.State, len(ps))
	for i, p := range ps {
		if err := store.CheckParents(p, states); err != nil {
			return nil, err
		}
		left := 0
		for ord, parent := range p.Parents {
			settled := states[parent].Final()
			e.add(parent, p.Child, ord, settled)
			if !settled {
				left++
			}
		}
		if left > 0 {
			out[i] = job.StateWaiting
		}
		n.add(p, left)
	}
	if len(e.parent) > 0 {
		if _, err := t.exec(`INSERT INTO job_deps (parent_id, child_id, ord, settled)
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::boolean[])`,
			e.parent, e.child, e.ord, e.settled); err != nil {
			return nil, err
		}
	}
	if _, err := t.exec(`INSERT INTO dep_nodes (job_id, parents_left, run_anyway, graph_id)
		SELECT * FROM unnest($1::bigint[], $2::integer[], $3::boolean[], $4::bigint[])`,
		n.id, n.left, n.anyway, n.graph); err != nil {
		return nil, err
	}
	_, err = t.exec(`UPDATE jobs SET state = CASE WHEN u.left_n > 0 THEN 8 ELSE jobs.state END, parents = u.n
		FROM unnest($1::bigint[], $2::integer[], $3::integer[]) AS u(id, n, left_n) WHERE jobs.id = u.id`,
		n.id, n.parents, n.left)
	return out, err
}

// depEdges are the rows of job_deps JobDepsAdd inserts, as arrays.
type depEdges struct {
	parent, child []int64
	ord           []int32
	settled       []bool
}

func (e *depEdges) add(parent, child int64, ord int, settled bool) {
	e.parent, e.child = append(e.parent, parent), append(e.child, child)
	e.ord, e.settled = append(e.ord, int32(ord)), append(e.settled, settled)
}

// depNodes are the rows of dep_nodes JobDepsAdd inserts, and each job's parents, as arrays.
type depNodes struct {
	id, graph     []int64
	left, parents []int32
	anyway        []bool
}

func (n *depNodes) add(p *store.JobDepsParams, left int) {
	n.id, n.graph = append(n.id, p.Child), append(n.graph, p.Graph)
	n.left, n.parents = append(n.left, int32(left)), append(n.parents, int32(len(p.Parents)))
	n.anyway = append(n.anyway, p.RunAnyway)
}

// parentStates reads the states of the parents of ps, locked (shared) in id order so that none
// of them becomes final before the edges to it are stored (its settling would miss them).
//
// A lease skips the rows another transaction holds (SKIP LOCKED), and takes a round that
// finds nothing for one that saw every ready job: a ready parent held here, skipped by another
// broker's round, was left PENDING beside that broker's idle worker until something else woke
// it. Holding one, the transaction therefore publishes EventReady: it reaches the other
// brokers once the commit has let the parent go.
func (t *tx) parentStates(ps []*store.JobDepsParams) (map[int64]job.State, error) {
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.Parents...)
	}
	states := make(map[int64]job.State, len(ids))
	if len(ids) == 0 {
		return states, nil
	}
	rows, err := t.tx.Query(t.ctx, `SELECT id, state FROM jobs WHERE id = ANY($1) ORDER BY id FOR SHARE`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var st int16
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		states[id] = job.State(st)
		if job.State(st) == job.StatePending {
			t.Publish(store.Event{Kind: store.EventReady})
		}
	}
	return states, rows.Err()
}

func (s *Store) JobDepsGet(ctx context.Context, id int64) (*store.JobDeps, error) {
	var out *store.JobDeps
	err := s.read(ctx, "job_deps_get", func(ctx context.Context) error {
		var err error
		out, err = s.depsOf(ctx, id)
		return err
	})
	return out, err
}

func (s *Store) ParentResults(ctx context.Context, id int64) ([]store.ParentInfo, error) {
	var out []store.ParentInfo
	err := s.read(ctx, "parent_results", func(ctx context.Context) error {
		var err error
		out, err = s.parentsOf(ctx, id)
		return err
	})
	return out, err
}

func (s *Store) GraphGet(ctx context.Context, graph int64) ([]*job.Job, map[int64]*store.JobDeps, error) {
	var jobs []*job.Job
	deps := map[int64]*store.JobDeps{}
	err := s.read(ctx, "graph_get", func(ctx context.Context) error {
		var err error
		jobs, err = scanJobs(s.pool.Query(ctx, `SELECT `+listColumns+` FROM jobs WHERE id IN
			(SELECT job_id FROM dep_nodes WHERE graph_id = $1) ORDER BY id`, graph))
		if err != nil {
			return err
		}
		clear(deps)
		return s.graphDeps(ctx, graph, deps)
	})
	if err == nil && len(jobs) == 0 {
		err = fmt.Errorf("graph %d: %w", graph, store.ErrNotFound)
	}
	return jobs, deps, err
}

// graphDeps reads the dependencies of every job of graph into deps, with three queries
// whatever the graph's size.
func (s *Store) graphDeps(ctx context.Context, graph int64, deps map[int64]*store.JobDeps) error {
	rows, err := s.pool.Query(ctx, `SELECT job_id, parents_left, run_anyway, graph_id, cancelled_by FROM dep_nodes WHERE graph_id = $1`, graph)
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
	if rows, err = s.pool.Query(ctx, `SELECT d.child_id, p.id, p.type, p.state FROM job_deps d
		JOIN dep_nodes w ON w.job_id = d.child_id JOIN jobs p ON p.id = d.parent_id
		WHERE w.graph_id = $1 ORDER BY d.child_id, d.ord`, graph); err != nil {
		return err
	}
	for rows.Next() {
		var child int64
		var p store.ParentInfo
		var st int16
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
	if rows, err = s.pool.Query(ctx, `SELECT d.parent_id, d.child_id FROM job_deps d
		JOIN dep_nodes w ON w.job_id = d.parent_id WHERE w.graph_id = $1 ORDER BY d.parent_id, d.child_id`, graph); err != nil {
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

func (s *Store) depsOf(ctx context.Context, id int64) (*store.JobDeps, error) {
	d := &store.JobDeps{}
	err := s.pool.QueryRow(ctx, `SELECT parents_left, run_anyway, graph_id, cancelled_by FROM dep_nodes WHERE job_id = $1`, id).
		Scan(&d.ParentsLeft, &d.RunAnyway, &d.Graph, &d.CancelledBy)
	node := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if d.Parents, err = s.parentsOf(ctx, id); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT child_id FROM job_deps WHERE parent_id = $1 ORDER BY child_id`, id)
	if err != nil {
		return nil, err
	}
	if d.Dependents, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return nil, err
	}
	if !node && len(d.Dependents) == 0 {
		return nil, nil
	}
	return d, nil
}

func (s *Store) parentsOf(ctx context.Context, id int64) ([]store.ParentInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.id, p.type, p.state, p.result FROM job_deps d JOIN jobs p ON p.id = d.parent_id
		WHERE d.child_id = $1 ORDER BY d.ord`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, store.ScanParent)
}

// settleSQL calls jobwire_settle_dependents (migrations 019, 020) when a finished job has an
// edge left to settle, and answers no row otherwise: the function, which would find the same
// and do nothing, costs a call of about 50 µs on the server, where the check alone takes a few
// (the usual case: most jobs have no dependents). It reads and writes rows by their keys only,
// so the planner settings a write of many turns off cannot change its plans: settings waiting
// to be turned back still wait (plannerNeutral).
const settleSQL = `SELECT released, cancelled FROM jobwire_settle_dependents($1, $2, $3, $4)
	WHERE EXISTS (SELECT FROM job_deps WHERE parent_id = ANY ($1) AND NOT settled)`

func init() { plannerNeutral[settleSQL] = true }
