package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job"
)

// Both stores read their records from rows of the same columns: the scanners below turn such a
// row into a record once, for either driver (database/sql's *sql.Row and *sql.Rows, pgx's
// Row and Rows), and each store keeps only its SQL. Times are stored as Unix nanoseconds,
// NULL (a nil *int64) for none.

// Scanner is one row of either driver.
type Scanner interface{ Scan(dest ...any) error }

// Rows is a result set of either driver. Its owner closes it: the drivers' Close methods
// differ.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// CollectRows reads every row of rows with scan, in order.
func CollectRows[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNull(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}

// RateLimitColumns are the columns ScanRateLimit reads, in order.
const RateLimitColumns = `name, job_type, queue, key, rate, per_ns, burst, updated_at`

// ScanRateLimit reads a rate limit from the columns RateLimitColumns.
func ScanRateLimit(row Scanner) (RateLimitRecord, error) {
	var r RateLimitRecord
	var per, updated int64
	if err := row.Scan(&r.Name, &r.Type, &r.Queue, &r.Key, &r.Rate, &per, &r.Burst, &updated); err != nil {
		return r, err
	}
	r.Per, r.UpdatedAt = time.Duration(per), fromNanos(updated)
	return r, nil
}

// ScheduleColumns are the columns ScanSchedule reads, in order.
const ScheduleColumns = `name, spec, from_config, paused, note, next_fire_at, last_fire_at, last_job_id,
	buffered_fire_at, created_at, updated_at`

// ScanSchedule reads a schedule from the columns ScheduleColumns.
func ScanSchedule(row Scanner) (*ScheduleRecord, error) {
	var (
		r                      ScheduleRecord
		next, created, updated int64
		lastFire, buffered     *int64
	)
	if err := row.Scan(&r.Name, &r.Spec, &r.FromConfig, &r.Paused, &r.Note, &next, &lastFire, &r.LastJobID,
		&buffered, &created, &updated); err != nil {
		return nil, err
	}
	r.NextFireAt, r.LastFireAt, r.BufferedFireAt = fromNanos(next), fromNull(lastFire), fromNull(buffered)
	r.CreatedAt, r.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &r, nil
}

// ScanConcurrencyRule reads a rule from the columns name, job_type, queue, key_expr,
// max_running.
func ScanConcurrencyRule(row Scanner) (ConcurrencyRule, error) {
	var r ConcurrencyRule
	err := row.Scan(&r.Name, &r.Type, &r.Queue, &r.Key, &r.MaxRunning)
	return r, err
}

// ScanConcurrencyStat reads a rule's stat from the columns the rule, its keys, those at their
// limit, its held jobs and its ready jobs.
func ScanConcurrencyStat(row Scanner) (ConcurrencyStat, error) {
	var st ConcurrencyStat
	err := row.Scan(&st.Rule, &st.Keys, &st.AtLimit, &st.Held, &st.Waiting)
	return st, err
}

// ScanKeyedCandidate reads a candidate from the columns id, queue, its key, its limit, the
// key's held jobs, the payload's size, the type and the rate key.
func ScanKeyedCandidate(row Scanner) (KeyedCandidate, error) {
	var c KeyedCandidate
	err := row.Scan(&c.ID, &c.Queue, &c.Key, &c.Limit, &c.Held, &c.Size, &c.Type, &c.RateKey)
	return c, err
}

// ScanParent reads a parent from the columns id, type, state and result.
func ScanParent(row Scanner) (ParentInfo, error) {
	var p ParentInfo
	var st int64
	err := row.Scan(&p.ID, &p.Type, &st, &p.Result)
	p.State = job.State(st)
	return p, err
}

// BatchColumns are the columns ScanBatch reads, in order.
// An open batch's total is counted from its jobs: it is stored when the batch closes.
const BatchColumns = `id, description, created_at, closed_at, completed_at,
	CASE WHEN closed_at IS NULL THEN (SELECT count(*) FROM jobs WHERE batch_id = batches.id) ELSE total END,
	succeeded, dead, cancelled, on_success, on_complete, success_job_id, complete_job_id`

// ScanBatch reads a batch from the columns BatchColumns.
func ScanBatch(row Scanner) (*Batch, error) {
	var b Batch
	var created int64
	var closed, completed, successID, completeID *int64
	var success, complete []byte
	err := row.Scan(&b.ID, &b.Description, &created, &closed, &completed, &b.Total, &b.Succeeded, &b.Dead,
		&b.Cancelled, &success, &complete, &successID, &completeID)
	if err != nil {
		return nil, err
	}
	b.CreatedAt, b.ClosedAt, b.CompletedAt = fromNanos(created), fromNull(closed), fromNull(completed)
	if successID != nil {
		b.SuccessJobID = *successID
	}
	if completeID != nil {
		b.CompleteJobID = *completeID
	}
	if b.OnSuccess, err = decodeCallback(success); err != nil {
		return nil, fmt.Errorf("batch %d: on_success: %w", b.ID, err)
	}
	if b.OnComplete, err = decodeCallback(complete); err != nil {
		return nil, fmt.Errorf("batch %d: on_complete: %w", b.ID, err)
	}
	return &b, nil
}

// EncodeCallback is cb as stored: JSON text, or NULL (nil) for none.
func EncodeCallback(cb *BatchCallback) (any, error) {
	if cb == nil {
		return nil, nil
	}
	data, err := json.Marshal(cb)
	return string(data), err
}

func decodeCallback(data []byte) (*BatchCallback, error) {
	if data == nil {
		return nil, nil
	}
	var cb BatchCallback
	return &cb, json.Unmarshal(data, &cb)
}
