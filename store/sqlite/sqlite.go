// Package sqlite is the embedded default store: one SQLite file in WAL mode through the pure-Go
// modernc.org/sqlite driver.
//
// Writes go through a single connection, one transaction at a time; the broker batches many
// operations into each transaction (group commit). Reads use a separate pool of connections,
// which WAL lets run beside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// Synchronous is SQLite's durability setting for commits in WAL mode.
type Synchronous string

const (
	// SyncNormal: a commit survives a crash of the broker process; the last commits before a
	// power loss or OS crash may be lost. The default.
	SyncNormal Synchronous = "NORMAL"
	// SyncFull: every commit is flushed to disk before it is acknowledged; survives power loss.
	SyncFull Synchronous = "FULL"
)

// Options configure the store.
type Options struct {
	Synchronous Synchronous
	// BusyTimeout is how long SQLite itself waits for a lock before returning SQLITE_BUSY.
	BusyTimeout time.Duration
	// Logger receives the store's own warnings (background checkpoints). Nil: slog.Default().
	Logger *slog.Logger
	// Retry runs every operation, retrying short-lived storage faults. Nil means a
	// storeretry.Policy with storeretry.DefaultOptions and Classify, logging to slog.Default:
	// no caller gets a store that gives up on the first SQLITE_BUSY by accident.
	Retry Retrier
}

// Retrier runs a storage operation, retrying it when it fails with a short-lived fault.
type Retrier interface {
	Do(ctx context.Context, op string, fn func(ctx context.Context) error) error
}

// RetryCounter is a Retrier that counts its retries by error code, as *storeretry.Policy does.
type RetryCounter interface {
	Counters() map[string]int64
}

// Store is the SQLite store.
type Store struct {
	w *sql.DB // one connection: every write
	// writeMu makes writes take turns on wc, the write connection, which the store holds for
	// its whole life so that BEGIN, COMMIT and every statement stay compiled on it.
	writeMu                 sync.Mutex
	wc                      *sql.Conn
	begin, commit, rollback *sql.Stmt
	r                       *sql.DB // readers
	retry                   Retrier
	cp                      *sql.DB // background checkpoints
	log                     *slog.Logger
	stmts                   *stmtCache
	queues                  *store.KnownQueues            // queues known to have a row
	receipts                atomic.Int64                  // the last receipt number a Write took
	onReady                 atomic.Pointer[func()]        // told of dependents made ready (deps.go)
	onChanged               atomic.Pointer[func([]int64)] // told of dependents cancelled or revived (deps.go)

	stopCheckpoints, checkpointsDone chan struct{}
}

var _ store.Store = (*Store)(nil)

// defaultBusyTimeout is how long a statement waits for a lock another connection holds when
// Options.BusyTimeout is zero.
const defaultBusyTimeout = 5 * time.Second

// dataSource is the driver's name for the database at path, with the store's pragmas and extra.
func dataSource(path string, sync Synchronous, busyTimeout time.Duration, extra ...string) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+string(sync)+")")
	q.Add("_pragma", "foreign_keys(1)")
	for _, e := range extra {
		q.Add("_pragma", e)
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) the database at path and applies migrations.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Synchronous == "" {
		opts.Synchronous = SyncNormal
	}
	if opts.Synchronous != SyncNormal && opts.Synchronous != SyncFull {
		return nil, fmt.Errorf("synchronous must be NORMAL or FULL, got %q", opts.Synchronous)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Retry == nil {
		p, err := storeretry.New(storeretry.Config{Options: storeretry.DefaultOptions(), Classify: Classify})
		if err != nil {
			return nil, err
		}
		opts.Retry = p
	}
	dsn := func(extra ...string) string { return dataSource(path, opts.Synchronous, opts.BusyTimeout, extra...) }
	// The writer checkpoints only as a backstop (walBackstopPages); checkpointLoop does it in the
	// background, so a commit never stalls behind copying the log into the database.
	w, err := sql.Open("sqlite", dsn(fmt.Sprintf("wal_autocheckpoint(%d)", walBackstopPages)))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := migrate(ctx, w, opts.Logger); err != nil {
		_ = w.Close()
		return nil, err
	}
	// Receipt numbers go on from the last run's: a stored receipt is never taken again.
	var lastReceipt int64
	if err := w.QueryRowContext(ctx, `SELECT COALESCE(MAX(receipt), 0) FROM write_receipts`).Scan(&lastReceipt); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("read write receipts: %w", err)
	}
	wc, err := w.Conn(ctx)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	var txStmts [3]*sql.Stmt
	for i, q := range []string{"BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"} {
		if txStmts[i], err = wc.PrepareContext(ctx, q); err != nil {
			_ = wc.Close()
			_ = w.Close()
			return nil, fmt.Errorf("prepare %s: %w", q, err)
		}
	}
	r, err := sql.Open("sqlite", dsn("query_only(1)"))
	if err != nil {
		_ = wc.Close()
		_ = w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	cp, err := sql.Open("sqlite", dsn())
	if err != nil {
		_ = wc.Close()
		_ = w.Close()
		_ = r.Close()
		return nil, err
	}
	cp.SetMaxOpenConns(1)
	s := &Store{w: w, wc: wc, begin: txStmts[0], commit: txStmts[1], rollback: txStmts[2],
		r: r, cp: cp, log: opts.Logger, retry: opts.Retry, stmts: newStmtCache(wc), queues: &store.KnownQueues{},
		stopCheckpoints: make(chan struct{}), checkpointsDone: make(chan struct{})}
	s.receipts.Store(lastReceipt)
	go s.checkpointLoop()
	return s, nil
}

const (
	// checkpointEvery is how often the background checkpointer copies the write-ahead log
	// into the database file. A checkpoint's copy and sync hold up concurrent commits for a
	// moment that grows with its size: measured at 1,000 jobs/s, every 25ms kept the p99
	// enqueue-to-start near 8ms, every 500ms near 12ms and every 5s near 280ms.
	checkpointEvery = 25 * time.Millisecond
	// walBackstopPages lets the writer checkpoint by itself once the log holds this many pages
	// (about 80 MB). Under steady load that is how the log goes back to its start: SQLite
	// rewinds it only when a write transaction begins with every page already copied, and
	// commits keep landing while a background checkpoint syncs. The background checkpoints
	// leave the writer's little to copy; it still waits for two syncs, a few milliseconds,
	// once per 80 MB of log (every few seconds at 1,000 jobs/s).
	walBackstopPages = 20000
)

// checkpointLoop runs PASSIVE checkpoints on its own connection: they copy what they can
// without blocking the writer or readers.
func (s *Store) checkpointLoop() {
	defer close(s.checkpointsDone)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-t.C:
			if _, err := s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil && ErrorCodeName(err) != "SQLITE_BUSY" {
				s.log.Warn("background checkpoint", "err", err)
			}
		}
	}
}

// Close stops the checkpointer and closes every connection.
func (s *Store) Close() error {
	close(s.stopCheckpoints)
	<-s.checkpointsDone
	s.writeMu.Lock()
	s.stmts.close()
	for _, st := range []*sql.Stmt{s.begin, s.commit, s.rollback} {
		_ = st.Close()
	}
	wcErr := s.wc.Close()
	s.writeMu.Unlock()
	return errors.Join(wcErr, s.w.Close(), s.r.Close(), s.cp.Close())
}

// StorageRetries returns how many storage operations were retried, keyed by the error code that
// caused the retry (e.g. "SQLITE_BUSY", "COMMAND_TIMEOUT"), since the store was opened. It is
// empty when the store's Retrier does not count (see RetryCounter).
func (s *Store) StorageRetries() map[string]int64 {
	if c, ok := s.retry.(RetryCounter); ok {
		return c.Counters()
	}
	return map[string]int64{}
}

// Write runs fn in one IMMEDIATE transaction through the store's retry policy.
//
// This is where every write is made safe to retry (store.Store.Write): each call takes a new
// receipt number, stored by the transaction that commits it. A try that reached COMMIT may have
// committed even when it reports failure (the acknowledgement can be lost), so the tries after
// it look for the receipt first, and a write whose receipt is stored is not run again.
func (s *Store) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	receipt := s.receipts.Add(1)
	mayHaveCommitted := false
	return unavailable(s.retry.Do(ctx, op, func(ctx context.Context) error {
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
		// BEGIN IMMEDIATE is where a write waits for the lock, so it honours ctx (and the
		// command timeout). The statements inside hold the lock already and never wait; they
		// run without a cancellable context, which spares the driver a goroutine per statement.
		if _, err := s.begin.ExecContext(ctx); err != nil {
			return err
		}
		t := &tx{ctx: context.WithoutCancel(ctx), cache: s.stmts, queues: s.queues}
		committed := false
		defer func() {
			if !committed {
				// After a failed statement or COMMIT the transaction may still be open (a busy
				// COMMIT leaves it so); it must not outlive this call. A transaction SQLite
				// already rolled back makes this fail harmlessly.
				_, _ = s.rollback.ExecContext(t.ctx)
			}
		}()
		if mayHaveCommitted {
			// An earlier try reached COMMIT and was reported failed. If its receipt is stored,
			// that commit went through: this write is done, with the results fn set then.
			if done, err := t.receiptStored(receipt); err != nil || done {
				return err
			}
		}
		if err := fn(t); err != nil {
			return err
		}
		released, err := t.settleDependents()
		if err != nil {
			return err
		}
		if err := t.flushBatches(); err != nil {
			return err
		}
		if err := t.storeReceipt(receipt); err != nil {
			return err
		}
		mayHaveCommitted = true
		if _, err := s.commit.ExecContext(t.ctx); err != nil {
			return err
		}
		committed = true
		s.queues.Add(t.newQueues)
		s.dependentsReady(released + t.callbacks)
		s.dependentsChanged(t.settle.changed)
		return nil
	}))
}

// receiptSlots is how many receipts the database keeps (migration 009).
const receiptSlots = 64

func (t *tx) storeReceipt(receipt int64) error {
	_, err := t.exec(`INSERT INTO write_receipts (slot, receipt) VALUES (?, ?)
		ON CONFLICT (slot) DO UPDATE SET receipt = excluded.receipt`, receipt%receiptSlots, receipt)
	return err
}

func (t *tx) receiptStored(receipt int64) (bool, error) {
	var n int
	err := t.queryRow(`SELECT COUNT(*) FROM write_receipts WHERE slot = ? AND receipt = ?`, receipt%receiptSlots, receipt).Scan(&n)
	return n == 1, err
}

// read runs a read through the retry policy.
func (s *Store) read(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return unavailable(s.retry.Do(ctx, op, fn))
}

const jobColumns = `id, type, queue, payload, priority, state, attempts, max_attempts, run_at,
	created_at, finished_at, idempotency_key, attempt_timeout_ns, dead_reason, last_error_type,
	last_error_message, lease_token, lease_secret, lease_expires_at, worker_id, lease_owner, started_at,
	attempt_base, requeued_at, metadata, unique_key, unique_states, parents, batch_id, rate_key`

// listColumns are jobColumns without the payload: listings can hold many jobs, and payloads
// (up to the broker's payload limit each) are read one job at a time.
const listColumns = `id, type, queue, NULL, priority, state, attempts, max_attempts, run_at,
	created_at, finished_at, idempotency_key, attempt_timeout_ns, dead_reason, last_error_type,
	last_error_message, lease_token, lease_secret, lease_expires_at, worker_id, lease_owner, started_at,
	attempt_base, requeued_at, NULL, unique_key, unique_states, parents, batch_id, rate_key`

type scanner interface{ Scan(dest ...any) error }

func scanJob(sc scanner) (*job.Job, error) {
	var (
		j                                   job.Job
		runAt, createdAt, timeout           int64
		finishedAt, leaseExpires, startedAt sql.NullInt64
		requeuedAt                          sql.NullInt64
		key                                 sql.NullString
		uniqueKey                           sql.NullString
		uniqueStates                        int
		state, deadReason                   int
		secret, metadata                    []byte
		batch                               sql.NullInt64
	)
	err := sc.Scan(&j.ID, &j.Type, &j.Queue, &j.Payload, &j.Priority, &state, &j.Attempts,
		&j.MaxAttempts, &runAt, &createdAt, &finishedAt, &key, &timeout, &deadReason,
		&j.LastErrorType, &j.LastErrorMessage, &j.LeaseToken.Seq, &secret, &leaseExpires, &j.WorkerID, &j.LeaseOwner, &startedAt,
		&j.AttemptBase, &requeuedAt, &metadata, &uniqueKey, &uniqueStates, &j.Parents, &batch, &j.RateKey)
	if err != nil {
		return nil, err
	}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &j.Metadata); err != nil {
			return nil, fmt.Errorf("job %d: stored metadata: %w", j.ID, err)
		}
	}
	copy(j.LeaseToken.Secret[:], secret)
	j.State = job.State(state)
	j.DeadReason = job.DeadReason(deadReason)
	j.RunAt = fromNanos(runAt)
	j.CreatedAt = fromNanos(createdAt)
	j.FinishedAt = fromNull(finishedAt)
	j.LeaseExpiresAt = fromNull(leaseExpires)
	j.StartedAt = fromNull(startedAt)
	j.RequeuedAt = fromNull(requeuedAt)
	j.IdempotencyKey = key.String
	j.UniqueKey, j.UniqueStates = uniqueKey.String, unique.Mask(uniqueStates).States()
	j.BatchID = batch.Int64
	j.AttemptTimeout = time.Duration(timeout)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return &j, nil
}

// scanJobs reads every job of a query's rows and closes them.
func scanJobs(rows *sql.Rows, err error) ([]*job.Job, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*job.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func nullNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNull(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// JobGet reads one job with its attempt history.
func (s *Store) JobGet(ctx context.Context, id int64) (*job.Job, error) {
	var out *job.Job
	err := s.read(ctx, "job_get", func(ctx context.Context) error {
		j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := s.r.QueryContext(ctx, `SELECT number, worker_id, started_at, finished_at, outcome,
			failure_kind, error_type, message, details FROM attempts WHERE job_id = ? ORDER BY number`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a job.Attempt
			var started, finished int64
			var outcome, kind int
			if err := rows.Scan(&a.Number, &a.WorkerID, &started, &finished, &outcome, &kind,
				&a.ErrorType, &a.Message, &a.Details); err != nil {
				return err
			}
			a.StartedAt, a.FinishedAt = fromNanos(started), fromNanos(finished)
			a.Outcome, a.FailureKind = job.Outcome(outcome), job.FailureKind(kind)
			j.History = append(j.History, a)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		j.AddSucceededAttempt() // the successful attempt lives in the job row (see tx.JobFinish)
		if err := readOutcome(ctx, s.r, j); err != nil {
			return err
		}
		out = j
		return nil
	})
	return out, err
}

// JobList reads jobs in p.Order.
func (s *Store) JobList(ctx context.Context, p *store.JobListParams) ([]*job.Job, error) {
	k, err := p.Order.Keyset(store.JobSorts)
	if err != nil {
		return nil, err
	}
	var q strings.Builder
	q.WriteString(`SELECT ` + listColumns + ` FROM jobs WHERE true`)
	var args []any
	if p.State != 0 {
		q.WriteString(` AND state = ?`)
		args = append(args, int(p.State))
	}
	if p.Queue != "" {
		q.WriteString(` AND queue = ?`)
		args = append(args, p.Queue)
	}
	if p.Type != "" {
		q.WriteString(` AND type = ?`)
		args = append(args, p.Type)
	}
	args = keysetPage(&q, args, k, p.After, p.Limit)
	var out []*job.Job
	err = s.read(ctx, "job_list", func(ctx context.Context) error {
		var err error
		out, err = scanJobs(s.r.QueryContext(ctx, q.String(), args...))
		return err
	})
	return out, err
}

// BreakerLoadAll reads every saved breaker.
func (s *Store) BreakerLoadAll(ctx context.Context) ([]store.BreakerRecord, error) {
	var out []store.BreakerRecord
	err := s.read(ctx, "breaker_load", func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, `SELECT type, data, shut FROM breakers ORDER BY type`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.BreakerRecord
			if err := rows.Scan(&r.Type, &r.Data, &r.Shut); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// rowValues are the payload (never NULL: an empty one is stored empty) and the encoded
// metadata that every insert of p writes.
func rowValues(p *store.JobInsertParams) (payload []byte, meta any, err error) {
	payload = p.Payload
	if payload == nil {
		payload = []byte{}
	}
	meta, err = encodeMetadata(p.Metadata)
	return payload, meta, err
}

// encodeMetadata is how a job's metadata is stored: a JSON object, or NULL when there is none.
func encodeMetadata(m map[string]string) (any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	return json.Marshal(m)
}
