package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
)

// Batches (see store.BatchWriter), with several brokers finishing one batch's jobs at once.
//
// A transaction's final writes of batch jobs mark them candidates (store.BatchCandidates); where its
// writes end, after the finished totals (flushBatches, from Write), one statement marks the
// candidates that are final and not counted yet as counted (their rows are the transaction's
// own: it wrote them) and adds the counts to their batches' rows, locked in id order.
// A batch's row is thus the last row a transaction takes, held only for the rest of its
// commit; the batch whose counts reach its size completes there, once: completed_at is set
// under the row's lock, which every transaction that counts in it or closes it takes.
//
// Adding jobs to a batch takes its row FOR KEY SHARE, which neither the counts (FOR NO KEY
// UPDATE) nor other adds wait for; closing takes it FOR UPDATE, which waits for the adds in
// flight to commit, so the size it counts then is final: an add that comes after finds the
// batch closed.
//
// Why one row per batch and not shards: the counts change once per transaction per batch (a
// group commit carries hundreds of results), not once per job, so two brokers draining one
// batch queue on its row once per commit each; see docs/workflows.md for the measurement.

// rawBatchColumns are the columns store.ScanBatch reads, as stored (store.BatchColumns counts
// an open batch's total).
const rawBatchColumns = `id, description, created_at, closed_at, completed_at, total, succeeded, dead, cancelled,
	on_success, on_complete, success_job_id, complete_job_id`

func (t *tx) BatchCreate(p *store.BatchCreateParams) (int64, error) {
	success, err := store.EncodeCallback(p.OnSuccess)
	if err != nil {
		return 0, err
	}
	complete, err := store.EncodeCallback(p.OnComplete)
	if err != nil {
		return 0, err
	}
	var id int64
	err = t.tx.QueryRow(t.ctx, `INSERT INTO batches (description, created_at, on_success, on_complete)
		VALUES ($1, $2, $3, $4) RETURNING id`, p.Description, nanos(p.Now), success, complete).Scan(&id)
	return id, err
}

func (t *tx) BatchAdd(id int64, jobs []int64) error {
	var closed *int64
	err := t.tx.QueryRow(t.ctx, `SELECT closed_at FROM batches WHERE id = $1 FOR KEY SHARE`, id).Scan(&closed)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("batch %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if closed != nil {
		return fmt.Errorf("batch %d: %w", id, store.ErrBatchClosed)
	}
	return t.hold(`UPDATE jobs SET batch_id = $1 WHERE id = ANY($2::bigint[])`, id, jobs)
}

func (t *tx) BatchClose(id int64, now time.Time) (*store.Batch, error) {
	b, err := store.ScanBatch(t.tx.QueryRow(t.ctx, `SELECT `+rawBatchColumns+` FROM batches WHERE id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, store.ErrNotFound)
	}
	if err != nil || !b.Open() {
		return b, err
	}
	if err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM jobs WHERE batch_id = $1`, id).Scan(&b.Total); err != nil {
		return nil, err
	}
	b.ClosedAt = now
	if err := t.hold(`UPDATE batches SET closed_at = $1, total = $2 WHERE id = $3`, nanos(now), b.Total, id); err != nil {
		return nil, err
	}
	return b, t.completeBatch(b, now)
}

// countBatchJobsSQL marks the candidates $1 that are final and not counted yet as counted
// (they are the transaction's own rows: it finished them), adds them to their batches' counts,
// the batches' rows locked in id order first, and returns those batches as they are after: one
// statement, one round trip, for a transaction that finished jobs of batches.
var countBatchJobsSQL = countSQL(``, `id = ANY($1::bigint[])`)

// countCascadeSQL is countBatchJobsSQL for a transaction that made jobs DEAD or CANCELLED ($4):
// its candidates are also the dependents settling cancelled because of them, and theirs in
// turn (dep_nodes.cancelled_by names the parent whose failure cancelled a job). Settling
// (jobwire_settle_dependents) runs before this statement in the transaction, so it sees them
// cancelled; they are the transaction's own rows, locked by settling.
var countCascadeSQL = countSQL(`RECURSIVE cascade(id) AS (
	SELECT unnest($4::bigint[])
	UNION
	SELECT d.child_id FROM cascade c JOIN job_deps d ON d.parent_id = c.id
		JOIN dep_nodes w ON w.job_id = d.child_id AND w.cancelled_by = d.parent_id
), `, `(id = ANY($1::bigint[]) OR id IN (SELECT id FROM cascade))`)

// countSQL is a statement that counts the candidates which selects (after the queries of with,
// if any), as countBatchJobsSQL says, and takes the jobs that are no longer final (batches $2,
// states $3: a dead job requeued, a dependent revived with it) off their batches' counts, in
// the same statement: every batch row it changes is locked by one statement, in id order.
func countSQL(with, which string) string {
	return `WITH ` + with + `counted AS (
	UPDATE jobs SET batch_counted = true
	WHERE ` + which + ` AND batch_id IS NOT NULL AND NOT batch_counted AND state IN (5, 6, 7)
	RETURNING batch_id, state
), counts AS (
	SELECT batch_id, sum(s)::bigint AS s, sum(d)::bigint AS d, sum(c)::bigint AS c FROM (
		SELECT batch_id, count(*) FILTER (WHERE state = 5) AS s, count(*) FILTER (WHERE state = 6) AS d,
			count(*) FILTER (WHERE state = 7) AS c
		FROM counted GROUP BY batch_id
		UNION ALL
		SELECT batch_id, 0, -count(*) FILTER (WHERE state = 6), -count(*) FILTER (WHERE state = 7)
		FROM unnest($2::bigint[], $3::smallint[]) AS r(batch_id, state) GROUP BY batch_id
	) AS changes GROUP BY batch_id
), locked AS MATERIALIZED (
	SELECT id FROM batches WHERE id IN (SELECT batch_id FROM counts) ORDER BY id FOR NO KEY UPDATE
)
UPDATE batches SET succeeded = batches.succeeded + counts.s, dead = batches.dead + counts.d,
	cancelled = batches.cancelled + counts.c
FROM locked, counts
WHERE batches.id = locked.id AND counts.batch_id = locked.id
RETURNING ` + prefixed("batches", rawBatchColumns)
}

// flushBatches counts the candidates (store.BatchCandidates) that are final and not counted yet in
// their batches, and completes those that are done.
//
// A transaction that made jobs DEAD or CANCELLED counts the dependents its settling cancelled
// too (countCascadeSQL): it costs a round trip only to the rare writes that fail jobs, not to
// the successes, which cancel no dependent.
func (t *tx) flushBatches() error {
	ids, now := t.batches.Take()
	failed := t.settle.failed
	t.settle.failed = nil
	if now.Before(t.settle.now) {
		now = t.settle.now
	}
	requeued, states := t.batches.TakeUncounted()
	var rows pgx.Rows
	var err error
	switch {
	case len(failed) > 0:
		rows, err = t.tx.Query(t.ctx, countCascadeSQL, ids, requeued, states, failed)
	case len(ids) > 0 || len(requeued) > 0:
		rows, err = t.tx.Query(t.ctx, countBatchJobsSQL, ids, requeued, states)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	counted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Batch, error) { return store.ScanBatch(row) })
	if err != nil {
		return err
	}
	for _, b := range counted {
		if err := t.completeBatch(b, now); err != nil {
			return err
		}
	}
	return nil
}

// completeBatch enqueues b's callbacks when it is closed, not complete yet, and every one of
// its jobs is counted final. b's row is locked by the transaction.
func (t *tx) completeBatch(b *store.Batch, now time.Time) error {
	if b.Open() || b.Complete() || b.Succeeded+b.Dead+b.Cancelled < b.Total {
		return nil
	}
	failed, err := failedIDs(t.ctx, t.tx, b.ID)
	if err != nil {
		return err
	}
	more := max(b.Dead+b.Cancelled-int64(len(failed)), 0)
	var ps []*store.JobInsertParams
	var kinds []*int64
	if b.OnSuccess != nil && b.Dead+b.Cancelled == 0 {
		ps, kinds = append(ps, store.BatchCallbackParams(b, b.OnSuccess, "success", failed, more, now)), append(kinds, &b.SuccessJobID)
	}
	if b.OnComplete != nil {
		ps, kinds = append(ps, store.BatchCallbackParams(b, b.OnComplete, "complete", failed, more, now)), append(kinds, &b.CompleteJobID)
	}
	if len(ps) > 0 {
		res, err := t.JobInsertMany(ps)
		if err != nil {
			return err
		}
		for i, r := range res {
			*kinds[i] = r.ID
		}
		t.callbacks += len(res)
		t.Publish(store.Event{Kind: store.EventReady})
	}
	b.CompletedAt = now
	return t.hold(`UPDATE batches SET completed_at = $1, success_job_id = $2, complete_job_id = $3 WHERE id = $4`,
		nanos(now), nullID(b.SuccessJobID), nullID(b.CompleteJobID), b.ID)
}

// queryer is what failedIDs reads through: the pool or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// failedIDs lists the ids of a batch's DEAD and CANCELLED jobs, lowest first, at most
// store.BatchFailedMax.
func failedIDs(ctx context.Context, db queryer, batch int64) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT id FROM jobs WHERE batch_id = $1 AND state IN (6, 7) ORDER BY id LIMIT $2`,
		batch, store.BatchFailedMax)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func (s *Store) BatchGet(ctx context.Context, id int64) (*store.Batch, error) {
	var out *store.Batch
	err := s.read(ctx, "batch_get", func(ctx context.Context) error {
		b, err := store.ScanBatch(s.pool.QueryRow(ctx, `SELECT `+store.BatchColumns+` FROM batches WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("batch %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if b.FailedJobIDs, err = failedIDs(ctx, s.pool, id); err != nil {
			return err
		}
		out = b
		return nil
	})
	return out, err
}

func (s *Store) BatchList(ctx context.Context, p *store.BatchListParams) ([]*store.Batch, error) {
	q := &query{}
	q.sql.WriteString(`SELECT ` + store.BatchColumns + ` FROM batches WHERE true`)
	if p.Before > 0 {
		q.sql.WriteString(` AND id < ` + q.arg(p.Before))
	}
	q.sql.WriteString(p.StateFilter())
	q.sql.WriteString(` ORDER BY id DESC LIMIT ` + q.arg(p.Limit))
	var out []*store.Batch
	err := s.read(ctx, "batch_list", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Batch, error) { return store.ScanBatch(row) })
		return err
	})
	return out, err
}

func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// prefixed qualifies each of a list of columns with table.
func prefixed(table, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
