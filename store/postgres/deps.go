package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// settling is the jobs a transaction made final, whose dependents it settles before COMMIT
// (store/deps.go) with jobwire_settle_dependents (migration 016). An id may be listed for a
// write that changed nothing (a repeated result, a success whose lease was stale): the
// function reads the job's state, and settles each edge once.
type settling struct {
	ids      []int64
	now      time.Time
	released int // how many jobs it made ready, once the answer came
}

func (s *settling) add(id int64, now time.Time) {
	s.ids = append(s.ids, id)
	if now.After(s.now) {
		s.now = now
	}
}

// settleDependents settles the dependents of the jobs the transaction made final. It goes
// with COMMIT, after every write of the transaction's jobs (the successes' statement too, which
// may go with COMMIT itself), so it sees them all. It locks the dependents it changes, waiting
// jobs, in id order level by level: the only other writers of a waiting job are a cancel and
// another transaction's settling, so it closes no cycle with the writes of leases. The
// function tells every broker (a ready event) when it made jobs ready; the store tells its own
// broker too (OnDependentsReady), for one that is not in a cluster and does not listen.
func (t *tx) settleDependents(channel string) error {
	if len(t.settle.ids) == 0 {
		return nil
	}
	read := func(rows pgx.Rows) (int, error) {
		n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int32])
		return int(n), err
	}
	return runRows(t, true, `SELECT jobwire_settle_dependents($1, $2, $3)`,
		[]any{t.settle.ids, nanos(t.settle.now), channel}, read, func(n int, err error) {
			if err == nil {
				t.settle.released = n
			}
		})
}

// OnDependentsReady has fn called after each commit that made waiting jobs ready.
func (s *Store) OnDependentsReady(fn func()) { s.onReady.Store(&fn) }

func (s *Store) dependentsReady(n int) {
	if fn := s.onReady.Load(); n > 0 && fn != nil {
		(*fn)()
	}
}

func (t *tx) JobDepsAdd(ps []*store.JobDepsParams) ([]job.State, error) {
	out := make([]job.State, len(ps))
	for i, p := range ps {
		states, err := t.parentStates(p)
		if err != nil {
			return nil, err
		}
		left := 0
		ords, settled := make([]int32, len(p.Parents)), make([]bool, len(p.Parents))
		for ord, parent := range p.Parents {
			ords[ord], settled[ord] = int32(ord), states[parent].Final()
			if !settled[ord] {
				left++
			}
		}
		if len(p.Parents) > 0 {
			if _, err := t.exec(`INSERT INTO job_deps (parent_id, child_id, ord, settled)
				SELECT parent, $2, ord, settled FROM unnest($1::bigint[], $3::integer[], $4::boolean[]) AS u(parent, ord, settled)`,
				p.Parents, p.Child, ords, settled); err != nil {
				return nil, err
			}
		}
		if _, err := t.exec(`INSERT INTO dep_nodes (job_id, parents_left, run_anyway, graph_id) VALUES ($1, $2, $3, $4)`,
			p.Child, left, p.RunAnyway, p.Graph); err != nil {
			return nil, err
		}
		if left > 0 {
			out[i] = job.StateWaiting
		}
		if _, err := t.exec(`UPDATE jobs SET state = CASE WHEN $1 THEN 8 ELSE state END, parents = $2 WHERE id = $3`,
			left > 0, len(p.Parents), p.Child); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parentStates reads the states of p's parents, locked (shared) in id order so that none of
// them becomes final before the edges to it are stored (its settling would miss them), and
// refuses a parent that does not exist or that failed when p does not run anyway.
func (t *tx) parentStates(p *store.JobDepsParams) (map[int64]job.State, error) {
	states := make(map[int64]job.State, len(p.Parents))
	if len(p.Parents) == 0 {
		return states, nil
	}
	rows, err := t.tx.Query(t.ctx, `SELECT id, state FROM jobs WHERE id = ANY($1) ORDER BY id FOR SHARE`, p.Parents)
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
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return states, store.CheckParents(p, states)
}

func (t *tx) GraphOpenIDs(graph int64) ([]int64, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT j.id FROM dep_nodes w JOIN jobs j ON j.id = w.job_id
		WHERE w.graph_id = $1 AND j.state NOT IN (5, 6, 7) ORDER BY j.id`, graph)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
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
		for _, j := range jobs {
			if deps[j.ID], err = s.depsOf(ctx, j.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && len(jobs) == 0 {
		err = fmt.Errorf("graph %d: %w", graph, store.ErrNotFound)
	}
	return jobs, deps, err
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
	var out []store.ParentInfo
	for rows.Next() {
		var p store.ParentInfo
		var st int16
		if err := rows.Scan(&p.ID, &p.Type, &st, &p.Result); err != nil {
			return nil, err
		}
		p.State = job.State(st)
		out = append(out, p)
	}
	return out, rows.Err()
}
