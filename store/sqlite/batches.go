package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Batches (see store.BatchWriter). One writer at a time holds the file, so counting needs no
// lock order here: a transaction's final writes of batch jobs mark them candidates
// (store.BatchCandidates), and flushBatches, the last thing before COMMIT, counts those final
// and not counted yet, adds them to their batches and completes the batches that are done.

func (t *tx) BatchCreate(p *store.BatchCreateParams) (int64, error) {
	success, err := store.EncodeCallback(p.OnSuccess)
	if err != nil {
		return 0, err
	}
	complete, err := store.EncodeCallback(p.OnComplete)
	if err != nil {
		return 0, err
	}
	res, err := t.execResult(`INSERT INTO batches (description, created_at, on_success, on_complete) VALUES (?, ?, ?, ?)`,
		p.Description, nanos(p.Now), success, complete)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (t *tx) BatchAdd(id int64, jobs []int64) error {
	b, err := t.batch(id)
	if err != nil {
		return err
	}
	if !b.Open() {
		return fmt.Errorf("batch %d: %w", id, store.ErrBatchClosed)
	}
	for chunk := range slices.Chunk(jobs, idChunk) {
		args := []any{id}
		for _, j := range chunk {
			args = append(args, j)
		}
		if _, err := t.exec(`UPDATE jobs SET batch_id = ? WHERE id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) BatchClose(id int64, now time.Time) (*store.Batch, error) {
	b, err := t.batch(id)
	if err != nil || !b.Open() {
		return b, err
	}
	if err := t.queryRow(`SELECT count(*) FROM jobs WHERE batch_id = ?`, id).Scan(&b.Total); err != nil {
		return nil, err
	}
	b.ClosedAt = now
	if _, err := t.exec(`UPDATE batches SET closed_at = ?, total = ? WHERE id = ?`, nanos(now), b.Total, id); err != nil {
		return nil, err
	}
	return b, t.completeBatch(b, now)
}

// batch reads a batch in the transaction.
func (t *tx) batch(id int64) (*store.Batch, error) {
	b, err := store.ScanBatch(t.queryRow(`SELECT `+store.BatchColumns+` FROM batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, store.ErrNotFound)
	}
	return b, err
}

// flushBatches counts the candidates (store.BatchCandidates) that are final and not counted yet in
// their batches, and completes those that are done.
func (t *tx) flushBatches() error {
	ids, now := t.batches.Take()
	if len(ids) == 0 {
		return nil
	}
	type counts struct{ succeeded, dead, cancelled int64 }
	byBatch := map[int64]*counts{}
	for chunk := range slices.Chunk(ids, idChunk) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := t.query(`UPDATE jobs SET batch_counted = 1 WHERE id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)
			AND batch_id IS NOT NULL AND batch_counted = 0 AND `+finishedState+` RETURNING batch_id, state`, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var batch int64
			var state job.State
			if err := rows.Scan(&batch, &state); err != nil {
				rows.Close()
				return err
			}
			c := byBatch[batch]
			if c == nil {
				c = &counts{}
				byBatch[batch] = c
			}
			switch state {
			case job.StateSucceeded:
				c.succeeded++
			case job.StateDead:
				c.dead++
			default:
				c.cancelled++
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byBatch)) {
		c := byBatch[id]
		if _, err := t.exec(`UPDATE batches SET succeeded = succeeded + ?, dead = dead + ?, cancelled = cancelled + ?
			WHERE id = ?`, c.succeeded, c.dead, c.cancelled, id); err != nil {
			return err
		}
		b, err := t.batch(id)
		if err != nil {
			return err
		}
		if err := t.completeBatch(b, now); err != nil {
			return err
		}
	}
	return nil
}

// completeBatch enqueues b's callbacks when it is closed, not complete yet, and every one of
// its jobs is counted final.
func (t *tx) completeBatch(b *store.Batch, now time.Time) error {
	if b.Open() || b.Complete() || b.Succeeded+b.Dead+b.Cancelled < b.Total {
		return nil
	}
	failed, err := t.failedJobs(b.ID)
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
	res, err := t.JobInsertMany(ps)
	if err != nil {
		return err
	}
	for i, r := range res {
		*kinds[i] = r.ID
	}
	t.callbacks += len(res)
	b.CompletedAt = now
	_, err = t.exec(`UPDATE batches SET completed_at = ?, success_job_id = ?, complete_job_id = ? WHERE id = ?`,
		nanos(now), nullID(b.SuccessJobID), nullID(b.CompleteJobID), b.ID)
	return err
}

// failedJobs lists the ids of a batch's DEAD and CANCELLED jobs, lowest first, at most
// store.BatchFailedMax.
func (t *tx) failedJobs(batch int64) ([]int64, error) {
	return failedIDs(t.ctx, txQuerier{t}, batch)
}

// txQuerier is a transaction as a querier.
type txQuerier struct{ t *tx }

func (q txQuerier) QueryContext(_ context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.t.query(query, args...)
}

func failedIDs(ctx context.Context, db querier, batch int64) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM jobs WHERE batch_id = ? AND state IN (6, 7) ORDER BY id LIMIT ?`,
		batch, store.BatchFailedMax)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (s *Store) BatchGet(ctx context.Context, id int64) (*store.Batch, error) {
	var out *store.Batch
	err := s.read(ctx, "batch_get", func(ctx context.Context) error {
		b, err := store.ScanBatch(s.r.QueryRowContext(ctx, `SELECT `+store.BatchColumns+` FROM batches WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("batch %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if b.FailedJobIDs, err = failedIDs(ctx, s.r, id); err != nil {
			return err
		}
		out = b
		return nil
	})
	return out, err
}

func (s *Store) BatchList(ctx context.Context, p *store.BatchListParams) ([]*store.Batch, error) {
	var q strings.Builder
	q.WriteString(`SELECT ` + store.BatchColumns + ` FROM batches WHERE 1 = 1`)
	var args []any
	if p.Before > 0 {
		q.WriteString(` AND id < ?`)
		args = append(args, p.Before)
	}
	q.WriteString(p.StateFilter())
	q.WriteString(` ORDER BY id DESC LIMIT ?`)
	args = append(args, p.Limit)
	var out []*store.Batch
	err := s.read(ctx, "batch_list", func(ctx context.Context) error {
		rows, err := s.r.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, store.ScanBatch)
		return err
	})
	return out, err
}

func nullID(id int64) sql.NullInt64 { return sql.NullInt64{Int64: id, Valid: id != 0} }
