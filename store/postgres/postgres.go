// Package postgres is the PostgreSQL store, through github.com/jackc/pgx/v5 and a pool of
// connections. It keeps the same contract as the SQLite store (store/storetest) with the same
// data model, so a broker behaves the same on either.
//
// Writes keep group commit: the broker batches many operations into one Store.Write, which is
// one transaction on one pooled connection. Leasing locks the rows it takes with
// FOR UPDATE SKIP LOCKED, and every write about a lease is fenced by the lease's token in its
// SQL, so the database itself never hands one job to two holders.
//
// Several brokers may serve one database (one schema) at once, each through its own Store:
// the store is their store.Cluster (cluster.go).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/reach"
	"github.com/jobwire/jobwire/store/storeretry"
)

// Options configure the store.
type Options struct {
	// MaxConns bounds the pool. Zero: DefaultMaxConns, or the URL's pool_max_conns.
	MaxConns int32
	// Logger receives the store's own messages (migrations). Nil: slog.Default().
	Logger *slog.Logger
	// Retry runs every operation, retrying short-lived storage faults. Nil means a
	// storeretry.Policy with storeretry.DefaultOptions and Classify.
	Retry Retrier
	// Addr is the address the broker listens on, recorded in its row of the brokers table so
	// an operator can tell brokers apart; "" when it has none.
	Addr string
	// ElectionInterval is how often a broker that does not lead tries to take the leadership,
	// and how often the leader checks its hold on it (see Campaign). Zero:
	// DefaultElectionInterval.
	ElectionInterval time.Duration
	// LeaderTimeout is how long the leader may go without recording that it is alive (its
	// heartbeat, every election interval) before another broker ends its database session
	// and takes the leadership: the failover time for a frozen leader (see Campaign). It must
	// be at least three election intervals. Zero: DefaultLeaderTimeout, or five election
	// intervals if that is longer.
	LeaderTimeout time.Duration
	// IdleInTransaction is how long the server lets one of the store's sessions sit in an open
	// transaction without a statement before it ends the session (PostgreSQL's
	// idle_in_transaction_session_timeout), releasing its row locks. Zero:
	// DefaultIdleInTransaction; negative: the server's own setting.
	IdleInTransaction time.Duration

	tracer pgx.QueryTracer // tests: sees every statement and batch the connections send
	// now is the clock of the fronts of the ready indexes (front.go); nil: time.Now. The fronts
	// are a reading aid, not a decision about any job, but tests move their clock.
	now func() time.Time
}

// DefaultIdleInTransaction bounds how long a broker cut off from the database mid-transaction
// (a partition that drops packets, a frozen process) keeps the rows it locked: PostgreSQL would
// otherwise hold them until its TCP keepalives notice the dead session, which takes minutes to
// hours, and every other broker's write that needs one of those rows (a job's, a finished
// total's, a breaker's) waits that long; brokers that share the database would all stall behind
// the one that is gone. A broker's own transactions are pipelined and never wait on it for
// more than a moment, so five seconds leaves a loaded machine ample room.
const DefaultIdleInTransaction = 5 * time.Second

// DefaultMaxConns is the pool size when neither Options nor the URL set one: the two writers
// (the broker's and its enqueue writer's) and the broker's readers (stats, listings, the
// dashboard) rarely need more than a few at once.
const DefaultMaxConns = 8

// Retrier runs a storage operation, retrying it when it fails with a short-lived fault.
type Retrier interface {
	Do(ctx context.Context, op string, fn func(ctx context.Context) error) error
}

// Store is the PostgreSQL store.
type Store struct {
	pool     *pgxpool.Pool
	url      string // for messages, without the password
	retry    Retrier
	log      *slog.Logger
	queues   *store.KnownQueues
	ids      idCache
	receipts atomic.Int64 // the last receipt number a Write took, among this broker's

	brokerID         int64  // this store's row in the brokers table
	brokerName       string // brokerID as BrokerID says it, formatted once: every write names it
	channel          string // the schema's notification channel
	electionInterval time.Duration
	leaderTimeout    time.Duration
	campaignHook     func() // tests: runs at the start of each round of Campaign
	// roundBound bounds each statement of a campaign round but the heartbeat (which half the
	// leader timeout bounds): the election interval, so that the rounds keep their pace. Tests
	// of elections on a loaded machine raise it, so that a slow statement is not a failed one.
	roundBound time.Duration
	// aliveWindow is how long a broker may go unseen and still be taken for alive (listed
	// alive, its workers counted by the others): aliveFor election intervals. Tests raise it.
	aliveWindow time.Duration
	// workers counts the broker's worker streams for its heartbeat (CountWorkers); nil: none.
	workers   atomic.Pointer[func() int]
	onReady   atomic.Pointer[func()]         // told of dependents made ready (deps.go)
	onChanged atomic.Pointer[func([]int64)]  // told of dependents cancelled or revived (deps.go)
	peers     atomic.Pointer[map[string]int] // the other live brokers' counts (PeerWorkers)
	reach     atomic.Pointer[reach.Tracker]  // hears of the heartbeat (ReportReach); nil: nobody

	// commit commits a write's transaction; tests replace it to lose a commit's answer.
	commit func(ctx context.Context, tx pgx.Tx) error
	// fronts are where the leases of each shape left the ready indexes (front.go).
	fronts *fronts
}

var _ store.Store = (*Store)(nil)

// IsURL reports whether db names a PostgreSQL database (a postgres:// or postgresql:// URL)
// rather than a SQLite file.
func IsURL(db string) bool {
	for _, p := range []string{"postgres://", "postgresql://"} {
		if len(db) >= len(p) && db[:len(p)] == p {
			return true
		}
	}
	return false
}

// Open connects to the database at url (postgres://user:pass@host:port/db?...), applies the
// migrations under an advisory lock, and returns the store.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if !hasParam(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if opts.tracer != nil {
		cfg.ConnConfig.Tracer = opts.tracer
	}
	if opts.IdleInTransaction == 0 {
		opts.IdleInTransaction = DefaultIdleInTransaction
	}
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set && opts.IdleInTransaction > 0 {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(opts.IdleInTransaction.Milliseconds(), 10)
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Redact(url), err)
	}
	if opts.ElectionInterval <= 0 {
		opts.ElectionInterval = DefaultElectionInterval
	}
	switch {
	case opts.LeaderTimeout == 0:
		opts.LeaderTimeout = max(DefaultLeaderTimeout, 5*opts.ElectionInterval)
	case opts.LeaderTimeout < 3*opts.ElectionInterval:
		pool.Close()
		return nil, fmt.Errorf("open %s: the leader timeout (%s) must be at least three election intervals (%s)",
			Redact(url), opts.LeaderTimeout, 3*opts.ElectionInterval)
	}
	now := opts.now
	if now == nil {
		now = time.Now
	}
	s := &Store{pool: pool, url: Redact(url), retry: opts.Retry, log: opts.Logger, queues: &store.KnownQueues{}, fronts: newFronts(now),
		electionInterval: opts.ElectionInterval, leaderTimeout: opts.LeaderTimeout, commit: func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }}
	s.roundBound, s.aliveWindow = opts.ElectionInterval, aliveFor*opts.ElectionInterval
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// A new broker id each time: its receipts start at 1 and are never another broker's.
	if err := s.register(ctx, opts.Addr); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes every connection of the pool. Listen and Campaign end with their contexts.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// PoolStats reads the counters of the store's connection pool.
func (s *Store) PoolStats() store.PoolStats {
	st := s.pool.Stat()
	return store.PoolStats{Max: st.MaxConns(), InUse: st.AcquiredConns(), Idle: st.IdleConns(),
		Constructing: st.ConstructingConns(), Acquires: st.AcquireCount(), EmptyAcquires: st.EmptyAcquireCount(),
		CanceledAcquires: st.CanceledAcquireCount(), AcquireWait: st.AcquireDuration()}
}

// StorageRetries returns how many storage operations were retried, keyed by the error code that
// caused the retry (e.g. "40001", "CONNECTION_LOST"), since the store was opened; empty when the
// store's Retrier does not count.
func (s *Store) StorageRetries() map[string]int64 {
	if c, ok := s.retry.(interface{ Counters() map[string]int64 }); ok {
		return c.Counters()
	}
	return map[string]int64{}
}

// Write runs fn in one transaction through the store's retry policy.
//
// As in the SQLite store, each call takes a receipt number that the transaction stores: a try
// that reached COMMIT may have committed even when it reports failure (a connection lost during
// COMMIT), so the tries after it look for the receipt first, and a write whose receipt is
// stored is not run again. Receipts are numbered per broker and stored under its id, so two
// brokers taking the same number never see each other's.
//
// The events fn published (Tx.Publish) are sent just before COMMIT, in the transaction: they
// reach the listening brokers only if it commits.
func (s *Store) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	receipt := s.receipts.Add(1)
	mayHaveCommitted := false
	return unavailable(s.retry.Do(ctx, op, func(ctx context.Context) error {
		ptx, err := beginPipe(ctx, s.pool)
		if err != nil {
			return err
		}
		committed := false
		gen := s.fronts.generation()
		t := &tx{ctx: ctx, tx: ptx, queues: s.queues, ids: &s.ids, fronts: s.fronts}
		defer func() {
			if !committed {
				_ = ptx.Rollback(context.WithoutCancel(ctx))
				if mayHaveCommitted && t.readiedAhead() {
					s.fronts.reset()
				}
			}
		}()
		if mayHaveCommitted {
			if done, err := t.receiptStored(s.brokerID, receipt); err != nil || done {
				return err
			}
		}
		if err := fn(t); err != nil {
			return err
		}
		if err := t.settleDependents(s.channel, s.BrokerID()); err != nil {
			return err
		}
		if err := t.flushFinished(); err != nil {
			return err
		}
		if err := t.flushBatches(); err != nil { // the batches' rows come last (lockorder.go)
			return err
		}
		if err := t.storeReceipt(s.brokerID, receipt); err != nil {
			return err
		}
		if err := t.sendEvents(s.channel, s.BrokerID()); err != nil {
			return err
		}
		mayHaveCommitted = true
		if err := s.commit(ctx, ptx); err != nil {
			return err
		}
		committed = true
		if t.readiedAhead() {
			s.fronts.reset()
		} else {
			s.fronts.keep(gen, t.found)
		}
		s.queues.Add(t.newQueues)
		s.dependentsReady(t.settle.released + t.callbacks)
		s.dependentsChanged(t.settle.changed)
		return nil
	}))
}

// receiptSlots is how many receipts the database keeps per broker.
const receiptSlots = 64

func (t *tx) storeReceipt(broker, receipt int64) error {
	defer t.frontSafe()()
	return t.hold(receiptSQL, broker, receipt%receiptSlots, receipt)
}

const receiptSQL = `INSERT INTO write_receipts (broker, slot, receipt) VALUES ($1, $2, $3)
	ON CONFLICT (broker, slot) DO UPDATE SET receipt = excluded.receipt`

func (t *tx) receiptStored(broker, receipt int64) (bool, error) {
	defer t.frontSafe()()
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT COUNT(*) FROM write_receipts WHERE broker = $1 AND slot = $2 AND receipt = $3`,
		broker, receipt%receiptSlots, receipt).Scan(&n)
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

// listColumns are jobColumns without the payload.
const listColumns = `id, type, queue, NULL::bytea, priority, state, attempts, max_attempts, run_at,
	created_at, finished_at, idempotency_key, attempt_timeout_ns, dead_reason, last_error_type,
	last_error_message, lease_token, lease_secret, lease_expires_at, worker_id, lease_owner, started_at,
	attempt_base, requeued_at, NULL::jsonb, unique_key, unique_states, parents, batch_id, rate_key`

func scanJob(row pgx.Row) (*job.Job, error) {
	var (
		j                                   job.Job
		runAt, createdAt, timeout           int64
		finishedAt, leaseExpires, startedAt *int64
		requeuedAt                          *int64
		key                                 *string
		uniqueKey                           *string
		uniqueStates                        int32
		state, deadReason                   int16
		secret, metadata                    []byte
		batch                               *int64
	)
	err := row.Scan(&j.ID, &j.Type, &j.Queue, &j.Payload, &j.Priority, &state, &j.Attempts,
		&j.MaxAttempts, &runAt, &createdAt, &finishedAt, &key, &timeout, &deadReason,
		&j.LastErrorType, &j.LastErrorMessage, &j.LeaseToken.Seq, &secret, &leaseExpires, &j.WorkerID, &j.LeaseOwner, &startedAt,
		&j.AttemptBase, &requeuedAt, &metadata, &uniqueKey, &uniqueStates, &j.Parents, &batch, &j.RateKey)
	if err != nil {
		return nil, err
	}
	if batch != nil {
		j.BatchID = *batch
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
	if key != nil {
		j.IdempotencyKey = *key
	}
	if uniqueKey != nil {
		j.UniqueKey, j.UniqueStates = *uniqueKey, unique.Mask(uniqueStates).States()
	}
	j.AttemptTimeout = time.Duration(timeout)
	if j.Payload == nil {
		j.Payload = []byte{}
	}
	return &j, nil
}

// scanJobs reads every job of a query's rows and closes them.
func scanJobs(rows pgx.Rows, err error) ([]*job.Job, error) {
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

// nullNanos is t in nanoseconds, or NULL for the zero time.
func nullNanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNull(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}

// JobGet reads one job with its attempt history.
func (s *Store) JobGet(ctx context.Context, id int64) (*job.Job, error) {
	var out *job.Job
	err := s.read(ctx, "job_get", func(ctx context.Context) error {
		j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := s.pool.Query(ctx, `SELECT number, worker_id, started_at, finished_at, outcome,
			failure_kind, error_type, message, details FROM attempts WHERE job_id = $1 ORDER BY number`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a job.Attempt
			var started, finished int64
			var outcome, kind int16
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
		if err := readOutcome(ctx, s.pool, j); err != nil {
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
	q := &query{}
	q.sql.WriteString(`SELECT ` + listColumns + ` FROM jobs WHERE true`)
	if p.State != 0 {
		q.sql.WriteString(` AND state = ` + q.arg(int16(p.State)))
	}
	if p.Queue != "" {
		q.sql.WriteString(` AND queue = ` + q.arg(p.Queue))
	}
	if p.Type != "" {
		q.sql.WriteString(` AND type = ` + q.arg(p.Type))
	}
	keysetPage(q, k, p.After, p.Limit)
	var out []*job.Job
	err = s.read(ctx, "job_list", func(ctx context.Context) error {
		var err error
		out, err = scanJobs(s.pool.Query(ctx, q.sql.String(), q.args...))
		return err
	})
	return out, err
}

// BreakerLoadAll reads every saved breaker.
func (s *Store) BreakerLoadAll(ctx context.Context) ([]store.BreakerRecord, error) {
	var out []store.BreakerRecord
	err := s.read(ctx, "breaker_load", func(ctx context.Context) error {
		var err error
		out, err = scanBreakers(s.pool.Query(ctx, `SELECT type, data, shut FROM breakers ORDER BY type`))
		return err
	})
	return out, err
}

// encodeMetadata is how a job's metadata is stored: a JSON object, or NULL when there is none.
func encodeMetadata(m map[string]string) (*string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// Redact is a database URL without its password, for messages and logs.
func Redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "the database URL"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// hasParam reports whether the URL's query sets name.
func hasParam(dbURL, name string) bool {
	u, err := url.Parse(dbURL)
	return err == nil && u.Query().Has(name)
}
