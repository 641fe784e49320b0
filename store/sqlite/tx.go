package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// openState and finishedState repeat the conditions of the jobs_open and jobs_finished
// indexes. SQLite uses a partial index only when the query's WHERE clause contains the index's
// condition as written, so every query that reads ready, held or finished jobs states it
// before narrowing to the states it wants. They are ranges, not IN lists: see migration 003.
const (
	openState     = `state BETWEEN 2 AND 4`
	finishedState = `state BETWEEN 5 AND 7`
)

// tx is one write transaction.
type tx struct {
	ctx       context.Context // not cancellable: see Store.Write
	cache     *stmtCache      // its connection holds the transaction
	queues    *store.KnownQueues
	newQueues []string // queue rows this transaction created
	settle    settling // jobs made final, whose dependents it settles before COMMIT (deps.go)
	// batches are the jobs of batches its final writes may have finished, counted where its
	// writes end (flushBatches, batches.go).
	batches store.BatchCandidates
	// callbacks counts the batch callbacks it enqueued, ready at its commit.
	callbacks int
}

var _ store.Tx = (*tx)(nil)

func (t *tx) exec(q string, args ...any) (int64, error) {
	res, err := t.execResult(q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t *tx) queryJobs(q string, args ...any) ([]*job.Job, error) {
	return scanJobs(t.query(q, args...))
}

// insertOne adds one job, or answers with the job that holds its key: the job of its type
// that holds its idempotency key when that job has the same content, or else the job that
// holds its unique key; index is p's position in its call.
func (t *tx) insertOne(index int, p *store.JobInsertParams) (store.JobInsertResult, error) {
	state := job.StatePending
	if p.RunAt.After(p.Now) {
		state = job.StateScheduled
	}
	// No RETURNING: in SQLite it costs about as much as the insert itself. The row count says
	// whether the keys were free, and the new rowid is the job id. DO NOTHING names no
	// conflict target, so it covers both keys' indexes.
	payload, meta, err := rowValues(p)
	if err != nil {
		return store.JobInsertResult{}, err
	}
	res, err := t.execResult(`INSERT INTO jobs (type, queue, payload, priority, state,
		max_attempts, run_at, created_at, idempotency_key, attempt_timeout_ns, metadata, unique_key, unique_states, rate_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`,
		p.Type, p.Queue, payload, p.Priority, int(state), p.MaxAttempts, nanos(p.RunAt),
		nanos(p.Now), nullString(p.IdempotencyKey), int64(p.AttemptTimeout), meta,
		nullString(p.UniqueKey), p.UniqueStates, p.RateKey)
	if err != nil {
		return store.JobInsertResult{}, err
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return store.JobInsertResult{}, err
	}
	if inserted == 1 {
		id, err := res.LastInsertId()
		if err != nil {
			return store.JobInsertResult{}, err
		}
		if err := t.ensureQueue(p.Queue); err != nil {
			return store.JobInsertResult{}, err
		}
		return store.JobInsertResult{ID: id, State: state, RunAt: p.RunAt}, nil
	}
	if r, found, err := t.idempotentHolder(index, p); found || err != nil {
		return r, err
	}
	// One writer at a time: the unique key's holder is there to read.
	var id, runAt int64
	var st int
	if err := t.queryRow(`SELECT id, state, run_at FROM jobs WHERE unique_key = ?
		AND unique_key IS NOT NULL AND (unique_states >> state) & 1 = 1`, p.UniqueKey).Scan(&id, &st, &runAt); err != nil {
		return store.JobInsertResult{}, fmt.Errorf("read the job holding unique key %s: %w", p.UniqueKey, err)
	}
	return store.JobInsertResult{ID: id, Duplicate: true, Unique: true, State: job.State(st), RunAt: fromNanos(runAt)}, nil
}

// idempotentHolder answers an insert that was not added with the job of its type that holds
// its idempotency key, when one does (found): a duplicate if that job has the same content,
// else an *IdempotencyConflictError.
func (t *tx) idempotentHolder(index int, p *store.JobInsertParams) (store.JobInsertResult, bool, error) {
	if p.IdempotencyKey == "" {
		return store.JobInsertResult{}, false, nil
	}
	var id int64
	var st int
	var runAt, timeout int64
	var stored store.JobInsertParams
	err := t.queryRow(`SELECT id, state, run_at, queue, payload, priority, max_attempts, attempt_timeout_ns
		FROM jobs WHERE type = ? AND idempotency_key = ?`, p.Type, p.IdempotencyKey).Scan(&id, &st, &runAt,
		&stored.Queue, &stored.Payload, &stored.Priority, &stored.MaxAttempts, &timeout)
	if errors.Is(err, sql.ErrNoRows) && p.UniqueKey != "" {
		return store.JobInsertResult{}, false, nil // the unique key is what was taken
	}
	if err != nil {
		return store.JobInsertResult{}, false, fmt.Errorf("read job with idempotency key %q: %w", p.IdempotencyKey, err)
	}
	stored.AttemptTimeout = time.Duration(timeout)
	if diff := store.IdempotencyDiff(p, &stored); len(diff) > 0 {
		return store.JobInsertResult{}, true, &store.IdempotencyConflictError{Index: index, Type: p.Type,
			Key: p.IdempotencyKey, JobID: id, Fields: diff}
	}
	return store.JobInsertResult{ID: id, Duplicate: true, State: job.State(st), RunAt: fromNanos(runAt)}, true, nil
}

// nullString is s, or NULL for "".
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// in appends " AND col [NOT] IN (?, ?...)" for vals.
func in(q *strings.Builder, args []any, col string, not bool, vals []string) []any {
	if len(vals) == 0 {
		return args
	}
	q.WriteString(" AND " + col)
	if not {
		q.WriteString(" NOT")
	}
	q.WriteString(" IN (")
	for i, v := range vals {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("?")
		args = append(args, v)
	}
	q.WriteString(")")
	return args
}

// Publish does nothing: one broker serves a SQLite file, and it knows what it wrote.
func (t *tx) Publish(store.Event) {}

func (t *tx) Isolated(fn func() error) error {
	if _, err := t.exec(`SAVEPOINT isolated`); err != nil {
		return err
	}
	created := len(t.newQueues)
	if ferr := fn(); ferr != nil {
		if _, transient := Classify(ferr); transient {
			return ferr // storage as a whole: the transaction is retried
		}
		// The queue rows fn created are undone with the rest: the store must not remember
		// them as existing, or the next job of such a queue would skip creating its row.
		t.newQueues = t.newQueues[:created]
		if _, err := t.exec(`ROLLBACK TO isolated`); err != nil {
			return errors.Join(ferr, err)
		}
		if _, err := t.exec(`RELEASE isolated`); err != nil {
			return errors.Join(ferr, err)
		}
		return &store.IsolatedError{Err: ferr}
	}
	_, err := t.exec(`RELEASE isolated`)
	return err
}

// JobLeaseAtCommit leases at once: a statement costs no round trip here. As one statement
// does on PostgreSQL, each lease takes its slice of the dispatch order, its Limit jobs after
// the earlier leases' slices, and the jobs of its slice past its MaxBytes stay ready: each
// lease takes its whole slice, and what passes its MaxBytes is handed back once every slice is
// taken.
func (t *tx) JobLeaseAtCommit(ps []*store.JobLeaseParams, got func([][]*job.Job, error)) error {
	if err := store.CheckLeaseScope(ps); err != nil {
		return err
	}
	out := make([][]*job.Job, len(ps))
	var back []job.LeaseRef
	for i, p := range ps {
		whole := *p
		whole.MaxBytes = 0
		jobs, err := t.JobLease(&whole)
		if err != nil {
			return err
		}
		keep := store.WithinBytes(jobs, p.MaxBytes)
		for _, j := range jobs[keep:] {
			back = append(back, job.LeaseRef{JobID: j.ID, Token: j.LeaseToken})
		}
		out[i] = jobs[:keep]
	}
	if len(back) > 0 {
		if _, err := t.JobReleaseMany(back); err != nil {
			return err
		}
	}
	got(out, nil)
	return nil
}

// JobSucceedManyAtCommit is JobSucceedMany: a statement costs no round trip here.
func (t *tx) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	applied, err := t.JobSucceedMany(ps)
	if err != nil {
		return err
	}
	got(applied, nil)
	return nil
}

func (t *tx) JobLease(p *store.JobLeaseParams) ([]*job.Job, error) {
	types := p.LeasedTypes()
	if p.Limit <= 0 || len(types) == 0 {
		return nil, nil // no type to lease: every one named is left out
	}
	if store.NarrowsTypes(types) {
		var err error
		if types, err = t.readyTypes(types); err != nil || len(types) == 0 {
			return nil, err // none of them has a ready job
		}
	}
	// Read the jobs in dispatch order, then lease each by its primary key. One
	// UPDATE ... WHERE id IN (SELECT ...) RETURNING would need two temporary b-trees (the id
	// set and the returned rows) on every run, and RETURNING loses the order; for the one or
	// few jobs a round usually finds, that costs more than the updates. Reading first also
	// lets a capped queue drop out of the lease the moment its room is used up: the read then
	// starts again without it (each queue at most once), and what was leased is already gone
	// from the ready set.
	scope := *p
	scope.Types, scope.ExcludeTypes = types, nil // left out once, not in every read
	caps := p.Caps
	if p.EnforceQueues {
		scope.ExcludePaused = true
		caps = nil
		if !p.SkipCapped {
			room, err := t.queueRoom()
			if err != nil {
				return nil, err
			}
			caps = room
			scope.ExcludeQueues = store.WithoutRoom(scope.ExcludeQueues, room)
		}
	}
	if p.Keyed {
		return t.leaseKeyed(&scope, caps)
	}
	gate, err := t.rateGate(p)
	if err != nil {
		return nil, err
	}
	if len(scope.Queues) == 0 && !p.EnforceQueues && (scope.ExcludePaused || len(scope.ExcludeQueues) > 0) {
		named, ok, err := t.readyQueuesBut(&scope)
		if err != nil {
			return nil, err
		}
		if ok && len(named) == 0 {
			return nil, t.rateSave(gate, p.Rates) // every queue with ready jobs is left out
		}
		if ok {
			scope.Queues = named
		}
	}
	var leased []*job.Job
	until := nanos(p.LeaseUntil)
	bytes := 0 // payloads leased so far (MaxBytes)
	for len(leased) < p.Limit {
		q, args := leaseQuery(&scope)
		jobs, err := t.queryJobs(q, args...)
		if err != nil {
			return nil, err
		}
		if err := t.rateLoad(gate, store.JobBuckets(gate, jobs)); err != nil {
			return nil, err
		}
		full := ""
		var held *ratelimit.Hold // a rate limit's bucket this lease found empty
		for _, j := range jobs {
			if len(leased) == p.Limit || p.MaxBytes > 0 && bytes >= p.MaxBytes {
				break
			}
			room, capped := caps[j.Queue]
			if capped && room <= 0 {
				full = j.Queue
				break
			}
			if gate != nil {
				if held = gate.Admit(j.Type, j.Queue, j.RateKey); held != nil {
					break
				}
			}
			// Nothing else writes between the read above and this update: the transaction
			// holds the write lock. The state = 2 condition and the count check still turn a
			// broken assumption into an error rather than a second lease of the same job.
			token, err := job.NewLeaseToken(j.LeaseToken.Seq, p.Random)
			if err != nil {
				return nil, err
			}
			n, err := t.exec(`UPDATE jobs SET state = 3, lease_token = ?, lease_secret = ?, lease_expires_at = ?,
				worker_id = ?, lease_owner = ? WHERE id = ? AND state = 2`,
				token.Seq, token.Secret[:], until, p.WorkerID, p.Owner, j.ID)
			if err != nil {
				return nil, err
			}
			if n != 1 {
				return nil, fmt.Errorf("lease job %d: it changed while being leased", j.ID)
			}
			j.State = job.StateLeased
			j.LeaseToken = token
			j.LeaseExpiresAt = p.LeaseUntil
			j.WorkerID = p.WorkerID
			j.LeaseOwner = p.Owner
			if capped {
				caps[j.Queue] = room - 1
			}
			leased = append(leased, j)
			bytes += len(j.Payload)
		}
		if held != nil && (p.MaxBytes <= 0 || bytes < p.MaxBytes) {
			// Read again without the bucket's jobs: the ones after them may go.
			scope.ExcludeRated = append(slices.Clone(scope.ExcludeRated), *held)
			continue
		}
		if full == "" || p.MaxBytes > 0 && bytes >= p.MaxBytes {
			break // every ready job in scope was read, or the limit is reached
		}
		if !scope.DropQueue(full) {
			break
		}
	}
	return leased, t.rateSave(gate, p.Rates)
}

// leaseQuery selects the ready jobs p may lease, in dispatch order, reading them as
// store.PlanReads says. A lease that does not honour concurrency keys leaves the keyed jobs out
// (keyconc.go). Each read gives its jobs in dispatch order, and SQLite merges them (a compound
// SELECT whose ORDER BY every read's index gives), stopping at the limit: a lease reads about
// the jobs it takes, one more a read.
func leaseQuery(p *store.JobLeaseParams) (string, []any) {
	// The limit is written into the statement, not bound: a bound LIMIT makes SQLite compile
	// the statement again on every run. Callers keep the number of distinct limits small.
	order := ` ORDER BY priority DESC, run_at, id LIMIT ` + strconv.Itoa(p.Limit)
	one := *p // the scope's other conditions, written in every read
	one.Types = nil
	var sel strings.Builder
	var args []any
	reads := 0
	read := func(index, where string, keys ...any) {
		if reads++; reads > 1 {
			sel.WriteString(` UNION ALL `)
		}
		sel.WriteString(`SELECT ` + jobColumns + ` FROM jobs INDEXED BY ` + index + ` WHERE state = 2 AND ` + where)
		args = readyWhere(&sel, append(args, keys...), &one)
	}
	switch store.PlanReads(p.Queues, p.Types) {
	case store.ReadByQueueAndType:
		one.Queues = nil
		for _, q := range p.Queues {
			for _, t := range p.Types {
				read("jobs_ready_queue_type", `queue = ? AND type = ?`, q, t)
			}
		}
	case store.ReadByType:
		for _, t := range p.Types {
			read("jobs_ready_type", `type = ?`, t)
		}
	default:
		return openQuery(p, order)
	}
	sel.WriteString(order)
	if len(args) > maxVariables {
		// Each read binds the scope's names again: past SQLite's limit on bound variables,
		// one read of jobs_open is the statement that can run.
		return openQuery(p, order)
	}
	return sel.String(), args
}

// readyTypesSQL keeps, of a JSON array of types, those with a ready job: one probe of
// jobs_ready_type each, in the array's order.
const readyTypesSQL = `SELECT value FROM json_each(?) WHERE EXISTS
	(SELECT 1 FROM jobs INDEXED BY jobs_ready_type WHERE state = 2 AND type = json_each.value)`

// readyTypes narrows types to those with a ready job (store.NarrowsTypes). Nothing else writes
// while the transaction holds the write lock, so a type it leaves out has no job to lease.
func (t *tx) readyTypes(types []string) ([]string, error) {
	arg, err := json.Marshal(types)
	if err != nil {
		return nil, err
	}
	return t.queryStrings(readyTypesSQL, string(arg))
}

// maxVariables is how many bound variables a statement may have (SQLITE_MAX_VARIABLE_NUMBER's
// default since SQLite 3.32).
const maxVariables = 32766

// openQuery selects the ready jobs p may lease from jobs_open, queues named or not: the
// statement for a lease of every queue, or of more queues than a union of their reads is
// worth (store.MaxNamedQueues) or can bind (maxVariables). A union of 1,000 queues' reads would
// bind the scope's types once a queue and fail, and SQLite allows 500 terms in a union.
func openQuery(p *store.JobLeaseParams, order string) (string, []any) {
	var sel strings.Builder
	sel.WriteString(`SELECT ` + jobColumns + ` FROM jobs WHERE ` + openState + ` AND state = 2`)
	args := readyWhere(&sel, nil, p)
	sel.WriteString(order)
	return sel.String(), args
}

// readyWhere writes the conditions of leaseWhere and, for a lease that does not honour
// concurrency keys, leaves the keyed jobs out.
func readyWhere(sel *strings.Builder, args []any, p *store.JobLeaseParams) []any {
	args = leaseWhere(sel, args, p)
	if !p.Keyed {
		sel.WriteString(` AND concurrency_key = ''`)
	}
	return args
}

// leaseWhere writes the conditions on ready jobs (of table jobs) that p's scope and rules
// add, and returns args with their arguments.
func leaseWhere(sel *strings.Builder, args []any, p *store.JobLeaseParams) []any {
	args = in(sel, args, "type", false, p.Types)
	args = in(sel, args, "type", true, p.ExcludeTypes)
	args = in(sel, args, "queue", false, p.Queues)
	args = in(sel, args, "queue", true, p.ExcludeQueues)
	switch {
	case p.EnforceQueues && p.SkipCapped:
		sel.WriteString(` AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue
			AND (queues.paused OR queues.concurrency_limit > 0))`)
	case p.ExcludePaused:
		sel.WriteString(` AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue AND queues.paused)`)
	}
	if p.ExcludeShut {
		sel.WriteString(` AND NOT EXISTS (SELECT 1 FROM breakers WHERE breakers.type = jobs.type AND breakers.shut)`)
	}
	return rateExcluded(sel, args, p)
}

func (t *tx) JobStart(p *store.JobStartParams) (bool, error) {
	n, err := t.exec(`UPDATE jobs SET state = 4, attempts = attempts + 1, started_at = ?,
		lease_expires_at = ?, attempt_deadline = ?
		WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state = 3
		AND lease_expires_at > ?`,
		nanos(p.Now), nanos(p.LeaseUntil), nanos(p.AttemptDeadline), p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:],
		nanos(p.Now))
	if err != nil || n == 1 {
		return n == 1, err
	}
	return t.alreadyApplied(p.Ref, job.StateRunning, p.Attempt)
}

// succeed stores the success p reports, fenced by its lease, and reports whether it did; the
// caller counts it in finished_totals.
func (t *tx) succeed(p *store.JobFinishParams) (bool, error) {
	// One row, and only what changes: every column left out is an index that need not be
	// checked. The successful attempt needs no row of its own: the job row holds its worker,
	// start, end and number, and JobGet reports it from there.
	a := p.Attempt
	n, err := t.exec(`UPDATE jobs SET state = 5, attempts = ?, finished_at = ?, started_at = ?, result = ?
		WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,
		a.Number, nullNanos(p.Now), nanos(a.StartedAt), resultArg(p.Result), p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:])
	if err != nil || n != 1 {
		return false, err
	}
	t.settle.add(p.Ref.JobID, p.Now)
	return true, nil
}

func (t *tx) JobFinish(p *store.JobFinishParams) (bool, error) {
	t.batches.Finished(p)
	if p.Attempt.Outcome == job.OutcomeSucceeded {
		stored, err := t.succeed(p)
		if err != nil {
			return false, err
		}
		if stored {
			err := t.addFinished(p.Queue, p.Type, job.StateSucceeded, 1)
			return err == nil, err
		}
		return t.alreadyFinished(p)
	}
	var finished sql.NullInt64
	if p.State.Final() {
		finished = nullNanos(p.Now)
	}
	runAt := sql.NullInt64{}
	if p.State == job.StateScheduled || p.State == job.StatePending {
		runAt = nullNanos(p.RunAt)
	}
	a := p.Attempt
	// a.Number counts within the job's current run; the attempt record is numbered after
	// the attempts of earlier runs (attempt_base), so a requeued job keeps its history.
	var base int
	row := t.queryRow(`UPDATE jobs SET state = ?, attempts = ?, run_at = COALESCE(?, run_at),
			finished_at = ?, dead_reason = ?,
			last_error_type = CASE WHEN ? = '' THEN last_error_type ELSE ? END,
			last_error_message = CASE WHEN ? = '' THEN last_error_message ELSE ? END
			WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4) RETURNING attempt_base`,
		int(p.State), a.Number, runAt, finished, int(p.DeadReason),
		a.ErrorType, a.ErrorType, a.ErrorType, a.Message,
		p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:])
	err := row.Scan(&base)
	if errors.Is(err, sql.ErrNoRows) {
		return t.alreadyFinished(p)
	}
	if err != nil {
		return false, err
	}
	if p.State.Final() {
		t.settle.add(p.Ref.JobID, p.Now)
		if err := t.addFinished(p.Queue, p.Type, p.State, 1); err != nil {
			return false, err
		}
	}
	if p.Unstarted {
		return true, nil
	}
	_, err = t.exec(`INSERT INTO attempts (job_id, number, worker_id, started_at, finished_at, outcome,
		failure_kind, error_type, message, details) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (job_id, number) DO UPDATE SET finished_at = excluded.finished_at,
		outcome = excluded.outcome, failure_kind = excluded.failure_kind,
		error_type = excluded.error_type, message = excluded.message, details = excluded.details`,
		p.Ref.JobID, base+a.Number, a.WorkerID, nanos(a.StartedAt), nanos(a.FinishedAt), int(a.Outcome),
		int(a.FailureKind), a.ErrorType, a.Message, a.Details)
	return err == nil, err
}

func (t *tx) JobRelease(ref job.LeaseRef) (bool, error) {
	n, err := t.exec(`UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = ''
		WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state = 3`, ref.JobID, ref.Token.Seq, ref.Token.Secret[:])
	if err != nil || n == 1 {
		return n == 1, err
	}
	ls, err := t.leaseState(ref.JobID)
	return err == nil && ls.Released(ref), err
}

func (t *tx) JobExtendLeases(refs []job.LeaseRef, now, until time.Time) ([]job.LeaseRef, error) {
	var out []job.LeaseRef
	for _, r := range refs {
		n, err := t.exec(`UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)
			AND lease_expires_at > ?`,
			nanos(until), r.JobID, r.Token.Seq, r.Token.Secret[:], nanos(now))
		if err != nil {
			return nil, err
		}
		if n == 1 {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *tx) JobGetHeld(ref job.LeaseRef) (*job.Job, error) {
	jobs, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,
		ref.JobID, ref.Token.Seq, ref.Token.Secret[:])
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, store.ErrNotFound
	}
	return jobs[0], nil
}

func (t *tx) JobCancel(id int64, now time.Time) (*job.Job, error) {
	jobs, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("job %d: %w", id, store.ErrNotFound)
	}
	before := jobs[0]
	if before.State.Final() {
		return before, nil
	}
	if _, err := t.exec(`UPDATE jobs SET state = 7, finished_at = ?, lease_expires_at = NULL,
		attempt_deadline = NULL, started_at = NULL WHERE id = ?`, nanos(now), id); err != nil {
		return nil, err
	}
	t.settle.add(id, now)
	if err := t.addFinished(before.Queue, before.Type, job.StateCancelled, 1); err != nil {
		return nil, err
	}
	t.batches.Add(before.BatchID, id, now)
	if before.State == job.StateRunning {
		_, err = t.exec(`INSERT INTO attempts (job_id, number, worker_id, started_at, finished_at, outcome,
			message) VALUES (?, ?, ?, ?, ?, ?, 'cancelled while running') ON CONFLICT DO NOTHING`,
			id, before.AttemptBase+before.Attempts, before.WorkerID, nanos(before.StartedAt), nanos(now), int(job.OutcomeCancelled))
	}
	return before, err
}

func (t *tx) JobPromoteScheduled(now time.Time) (int, error) {
	n, err := t.exec(`UPDATE jobs SET state = 2 WHERE state = 1 AND run_at <= ?`, nanos(now))
	return int(n), err
}

func (t *tx) JobNextScheduledAt() (time.Time, bool, error) {
	var at sql.NullInt64
	if err := t.queryRow(`SELECT MIN(run_at) FROM jobs WHERE state = 1`).Scan(&at); err != nil {
		return time.Time{}, false, err
	}
	return fromNull(at), at.Valid, nil
}

func (t *tx) JobHeldExpired(now time.Time, limit int) ([]*job.Job, error) {
	return t.queryJobs(`SELECT `+jobColumns+` FROM jobs INDEXED BY jobs_open WHERE `+openState+` AND state IN (3, 4)
		AND (lease_expires_at <= ? OR (state = 4 AND attempt_deadline <= ?)) ORDER BY id LIMIT ?`,
		nanos(now), nanos(now), limit)
}

func (t *tx) JobListRunning() ([]*job.Job, error) {
	return t.queryJobs(`SELECT ` + listColumns + ` FROM jobs WHERE ` + openState + ` AND state = 4`)
}

func (t *tx) JobReleaseAllLeased() (int, error) {
	n, err := t.exec(`UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = '' WHERE ` + openState + ` AND state = 3`)
	return int(n), err
}

// BreakerSaveIf stores r if the type's row holds stored and the jobs of succeeded are
// SUCCEEDED under those leases. A SQLite store has one writer at a time, so a row changed
// since is an operator's change written apart from the writer's batch.
func (t *tx) BreakerSaveIf(r store.BreakerRecord, stored []byte, succeeded []job.LeaseRef) error {
	for _, ref := range succeeded {
		ls, err := t.leaseState(ref.JobID)
		if err != nil {
			return err
		}
		if ls.State != job.StateSucceeded || ls.Token.Seq != ref.Token.Seq {
			return fmt.Errorf("breaker of type %q counts the success of job %d, which is not stored", r.Type, ref.JobID)
		}
	}
	recs, err := t.BreakerGet([]string{r.Type})
	if err != nil {
		return err
	}
	if len(recs) != 1 || !bytes.Equal(recs[0].Data, stored) {
		return fmt.Errorf("breaker of type %q changed since it was read", r.Type)
	}
	return t.BreakerSave(r)
}

func (t *tx) BreakerSave(r store.BreakerRecord) error {
	_, err := t.exec(`INSERT INTO breakers (type, data, shut) VALUES (?, ?, ?)
		ON CONFLICT (type) DO UPDATE SET data = excluded.data, shut = excluded.shut`, r.Type, r.Data, r.Shut)
	return err
}

// alreadyFinished reports whether p's outcome is already stored: the same lease ended this
// attempt the way p says. A result written again after an ambiguous commit (the commit went
// through but its answer was lost) is then acknowledged as applied, not refused as stale, and
// still counts once.
func (t *tx) alreadyFinished(p *store.JobFinishParams) (bool, error) {
	return t.alreadyApplied(p.Ref, p.State, p.Attempt.Number)
}

// alreadyApplied reports whether a write fenced by ref that matched no row is already stored
// (store.LeaseState.Applied).
func (t *tx) alreadyApplied(ref job.LeaseRef, state job.State, attempts int) (bool, error) {
	ls, err := t.leaseState(ref.JobID)
	return err == nil && ls.Applied(ref, state, attempts), err
}

// leaseState reads what a fenced write that matched no row needs of its job.
func (t *tx) leaseState(id int64) (store.LeaseState, error) {
	var st int
	var ls store.LeaseState
	var secret []byte
	err := t.queryRow(`SELECT state, attempts, lease_token, lease_secret FROM jobs WHERE id = ?`, id).
		Scan(&st, &ls.Attempts, &ls.Token.Seq, &secret)
	if errors.Is(err, sql.ErrNoRows) {
		return store.LeaseState{}, nil
	}
	if err != nil {
		return store.LeaseState{}, err
	}
	ls.State = job.State(st)
	copy(ls.Token.Secret[:], secret)
	return ls, nil
}

// JobSucceedMany stores a batch of successes, each with the statement JobFinish uses for one
// (compiled once for the connection), and counts them in finished_totals once per queue and
// type. A statement a success costs less than one statement that reads the batch from a JSON
// list, as this did before: SQLite's JSON functions read each entry again for every field, and
// that took twice a statement's own cost (BenchmarkJobSucceedMany). Each statement also says
// whether its success applied, which the list could only say for the whole batch.
func (t *tx) JobSucceedMany(ps []*store.JobFinishParams) ([]bool, error) {
	t.batches.Finished(ps...)
	applied := make([]bool, len(ps))
	type key struct{ queue, typ string }
	succeeded := make(map[key]int, 1)
	for i, p := range ps {
		stored, err := t.succeed(p)
		if err != nil {
			return nil, err
		}
		if !stored {
			if applied[i], err = t.alreadyFinished(p); err != nil {
				return nil, err
			}
			continue
		}
		applied[i] = true
		succeeded[key{p.Queue, p.Type}]++
	}
	for k, c := range succeeded {
		if err := t.addFinished(k.queue, k.typ, job.StateSucceeded, c); err != nil {
			return nil, err
		}
	}
	return applied, nil
}

// addFinished adds n (negative: takes) to the total of finished jobs in one queue, type and
// state. The statements that change jobs call it; see migration 004.
func (t *tx) addFinished(queue, typ string, state job.State, n int) error {
	if queue == "" || typ == "" {
		return fmt.Errorf("finished totals: a job of queue %q and type %q", queue, typ)
	}
	_, err := t.exec(`INSERT INTO finished_totals (queue, type, state, n) VALUES (?, ?, ?, ?)
		ON CONFLICT (queue, type, state) DO UPDATE SET n = n + excluded.n`, queue, typ, int(state), n)
	return err
}

// ensureQueue creates the queue's row on its first job.
func (t *tx) ensureQueue(name string) error {
	if t.queues.Known(name) {
		return nil
	}
	if _, err := t.exec(`INSERT INTO queues (name) VALUES (?) ON CONFLICT DO NOTHING`, name); err != nil {
		return err
	}
	t.newQueues = append(t.newQueues, name)
	return nil
}

// insertChunk is how many jobs one multi-row insert carries.
const insertChunk = 32

// insertChunkSQL inserts insertChunk jobs without idempotency keys.
var insertChunkSQL = `INSERT INTO jobs (type, queue, payload, priority, state, max_attempts, run_at,
	created_at, attempt_timeout_ns, metadata, rate_key) VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", insertChunk), ", ")

// JobInsertMany inserts jobs in order, insertChunk at a time where they carry no idempotency
// key: one statement for many rows costs far less than a statement a row.
func (t *tx) JobInsertMany(ps []*store.JobInsertParams) ([]store.JobInsertResult, error) {
	out := make([]store.JobInsertResult, len(ps))
	args := make([]any, 0, 11*insertChunk)
	var chunk []int
	flush := func() error {
		args = args[:0]
		for _, i := range chunk {
			p := ps[i]
			out[i].State, out[i].RunAt = job.StatePending, p.RunAt
			if p.RunAt.After(p.Now) {
				out[i].State = job.StateScheduled
			}
			payload, meta, err := rowValues(p)
			if err != nil {
				return err
			}
			args = append(args, p.Type, p.Queue, payload, p.Priority, int(out[i].State), p.MaxAttempts,
				nanos(p.RunAt), nanos(p.Now), int64(p.AttemptTimeout), meta, p.RateKey)
		}
		res, err := t.execResult(insertChunkSQL, args...)
		if err != nil {
			return err
		}
		// One statement on the only write connection: its rows get consecutive ids.
		last, err := res.LastInsertId()
		if err != nil {
			return err
		}
		for k, i := range chunk {
			out[i].ID = last - int64(len(chunk)-1-k)
			if err := t.ensureQueue(ps[i].Queue); err != nil {
				return err
			}
		}
		chunk = chunk[:0]
		return nil
	}
	for i, p := range ps {
		if !p.Keyed() {
			if chunk = append(chunk, i); len(chunk) == insertChunk {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			continue
		}
		// Keep ids in request order: what waits in chunk goes first, one by one.
		for _, k := range chunk {
			r, err := t.insertOne(k, ps[k])
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		chunk = chunk[:0]
		r, err := t.insertOne(i, p)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	for _, k := range chunk {
		r, err := t.insertOne(k, ps[k])
		if err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, t.setKeys(ps, out)
}
