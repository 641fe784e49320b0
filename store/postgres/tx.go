package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// tx is one write transaction.
type tx struct {
	ctx       context.Context
	tx        pgx.Tx
	queues    *store.KnownQueues
	newQueues []string // queue rows this transaction created
	// events are what the transaction publishes at commit (Publish), each once.
	events map[store.Event]bool
	// room is what each capped queue may still lease in this transaction, counted under the
	// queues' locks (queues.go); nil until a lease enforcing the queues' rules needs it.
	room map[string]int
	ids  *idCache // the store's job ids drawn and not used yet
	// finished are the changes to the finished totals not written yet: they are written
	// together, in one order, where the transaction's writes of jobs end (see totals.go).
	finished []finishedChange
	// locked are the jobs JobLockRows locked, sorted: a write of many leases among them needs
	// no lock of its own first (lockLeases).
	locked []int64
	settle settling // jobs made final, whose dependents it settles before COMMIT (deps.go)
	// keysLocked: the transaction holds the concurrency keys' lock (keyconc.go).
	keysLocked bool
	// batches are the jobs of batches its final writes may have finished, counted where its
	// writes end (flushBatches, batches.go).
	batches store.BatchCandidates
	// callbacks counts the batch callbacks it enqueued, ready at its commit.
	callbacks int
	// fronts are the store's fronts of the ready indexes; found, how far each shape of lease
	// went in this write, kept as its front at the commit (front.go).
	fronts *fronts
	found  map[string]leasedTo
	// unread counts the breaker saves not yet known not to take a breaker out of shut
	// (reopening): until its answer is read, a save may have made its type's jobs ready.
	unread int
}

var _ store.Tx = (*tx)(nil)

// query builds a statement with numbered parameters.
type query struct {
	sql  strings.Builder
	args []any
}

// arg adds v as the next parameter and returns its placeholder.
func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

func (t *tx) exec(sql string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(t.ctx, sql, args...)
	return tag.RowsAffected(), err
}

// hold runs a statement whose only answer is success or failure: it is sent with the
// transaction's next statement that returns something, or with COMMIT (see pipeTx), and an
// error of its own fails that one.
func (t *tx) hold(sql string, args ...any) error {
	if p, ok := t.tx.(*pipeTx); ok {
		p.hold(sql, args...)
		return nil
	}
	_, err := t.tx.Exec(t.ctx, sql, args...)
	return err
}

func (t *tx) queryJobs(sql string, args ...any) ([]*job.Job, error) {
	return scanJobs(t.tx.Query(t.ctx, sql, args...))
}

// Publish records e to be sent when the transaction commits.
func (t *tx) Publish(e store.Event) {
	if t.events == nil {
		t.events = make(map[store.Event]bool)
	}
	t.events[e] = true
}

func (t *tx) Isolated(fn func() error) error {
	sp, err := t.tx.Begin(t.ctx) // a savepoint
	if err != nil {
		return err
	}
	outer, created := t.tx, len(t.newQueues)
	// What fn writes of the totals goes with it: the changes held before it are kept, even
	// those it wrote, whose statement the savepoint's rollback undoes.
	finished := slices.Clone(t.finished)
	t.tx = sp
	ferr := fn()
	if ferr == nil {
		if p, ok := sp.(*pipeTx); ok && p.data > 0 {
			ferr = p.flush(t.ctx) // what fn held must fail here, inside the savepoint
		}
	}
	t.tx = outer
	if ferr != nil {
		if _, transient := Classify(ferr); transient {
			return ferr // storage as a whole: the transaction is retried
		}
		t.newQueues = t.newQueues[:created] // their rows are undone with the rest
		t.room = nil                        // so are the leases it counted, and maybe its locks
		t.keysLocked = false
		t.finished = finished
		if err := sp.Rollback(t.ctx); err != nil {
			return errors.Join(ferr, err)
		}
		return &store.IsolatedError{Err: ferr}
	}
	return sp.Commit(t.ctx)
}

// insertOne adds one job with an idempotency or a unique key, or answers with the job that
// holds its key: the job of its type that holds its idempotency key when that job has the same
// content, or else the job that holds its unique key; index is p's position in its call.
//
// DO NOTHING names no conflict target, so it covers both keys' indexes. An insert of a key
// another transaction has inserted and not committed waits for it (lockorder.go); a holder it
// then finds may leave its states (finish) before the read that follows, so the insert is tried
// again, a few times.
func (t *tx) insertOne(index int, p *store.JobInsertParams) (store.JobInsertResult, error) {
	state := initialState(p)
	meta, err := encodeMetadata(p.Metadata)
	if err != nil {
		return store.JobInsertResult{}, err
	}
	for range store.UniqueTries {
		var id int64
		err = t.tx.QueryRow(t.ctx, `INSERT INTO jobs (type, queue, payload, priority, state,
			max_attempts, run_at, created_at, idempotency_key, attempt_timeout_ns, metadata, unique_key, unique_states, rate_key)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14)
			ON CONFLICT DO NOTHING RETURNING id`,
			p.Type, p.Queue, payloadOf(p), p.Priority, int16(state), p.MaxAttempts, nanos(p.RunAt),
			nanos(p.Now), nullText(p.IdempotencyKey), int64(p.AttemptTimeout), meta,
			nullText(p.UniqueKey), int32(p.UniqueStates), p.RateKey).Scan(&id)
		if err == nil {
			if err := t.ensureQueue(p.Queue); err != nil {
				return store.JobInsertResult{}, err
			}
			return store.JobInsertResult{ID: id, State: state, RunAt: p.RunAt}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.JobInsertResult{}, err
		}
		if r, found, err := t.idempotentHolder(index, p); found || err != nil {
			return r, err
		}
		var st int16
		var runAt int64
		err = t.tx.QueryRow(t.ctx, `SELECT id, state, run_at FROM jobs WHERE unique_key = $1
			AND unique_key IS NOT NULL AND (unique_states >> state) & 1 = 1`, p.UniqueKey).Scan(&id, &st, &runAt)
		if err == nil {
			return store.JobInsertResult{ID: id, Duplicate: true, Unique: true, State: job.State(st), RunAt: fromNanos(runAt)}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.JobInsertResult{}, fmt.Errorf("read the job holding unique key %s: %w", p.UniqueKey, err)
		}
	}
	return store.JobInsertResult{}, store.UniqueRaceError(p.UniqueKey)
}

// idempotentHolder answers an insert that was not added with the job of its type that holds
// its idempotency key, when one does (found): a duplicate if that job has the same content,
// else an *IdempotencyConflictError.
func (t *tx) idempotentHolder(index int, p *store.JobInsertParams) (store.JobInsertResult, bool, error) {
	if p.IdempotencyKey == "" {
		return store.JobInsertResult{}, false, nil
	}
	var id int64
	var st int16
	var runAt, timeout int64
	var stored store.JobInsertParams
	err := t.tx.QueryRow(t.ctx, `SELECT id, state, run_at, queue, payload, priority, max_attempts, attempt_timeout_ns
		FROM jobs WHERE type = $1 AND idempotency_key = $2`, p.Type, p.IdempotencyKey).Scan(&id, &st, &runAt,
		&stored.Queue, &stored.Payload, &stored.Priority, &stored.MaxAttempts, &timeout)
	if errors.Is(err, pgx.ErrNoRows) && p.UniqueKey != "" {
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

// nullText is s, or NULL for "".
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func initialState(p *store.JobInsertParams) job.State {
	if p.RunAt.After(p.Now) {
		return job.StateScheduled
	}
	return job.StatePending
}

func payloadOf(p *store.JobInsertParams) []byte {
	if p.Payload == nil {
		return []byte{}
	}
	return p.Payload
}

// JobInsertMany inserts jobs in order: runs of jobs without an idempotency key go in with one
// statement each, their ids drawn from the identity sequence first so that ids follow the
// order of the call.
func (t *tx) JobInsertMany(ps []*store.JobInsertParams) ([]store.JobInsertResult, error) {
	out := make([]store.JobInsertResult, len(ps))
	for i := 0; i < len(ps); {
		if ps[i].Keyed() {
			r, err := t.insertOne(i, ps[i])
			if err != nil {
				return nil, err
			}
			out[i] = r
			i++
			continue
		}
		end := i
		for end < len(ps) && !ps[end].Keyed() {
			end++
		}
		if err := t.insertRun(ps[i:end], out[i:end]); err != nil {
			return nil, err
		}
		i = end
	}
	return out, t.setKeys(ps, out)
}

// drawIDsSQL draws ids from the jobs' identity sequence. The sequence is named rather than
// looked up: pg_get_serial_sequence, evaluated once per row, cost ten times what nextval does.
const drawIDsSQL = `SELECT nextval('jobs_id_seq') FROM generate_series(1, $1)`

// insertRun inserts jobs without idempotency keys with one statement, their ids taken in
// ascending order (so that they follow the order of the call) from the ids the store drew
// before (idCache): the insert then needs no round trip of its own. Not one statement that
// draws and inserts: the server plans such a statement afresh on every run (0.2 ms, more than
// the insert of one job).
func (t *tx) insertRun(ps []*store.JobInsertParams, out []store.JobInsertResult) error {
	rows, err := t.insertRows(ps, out)
	if err != nil {
		return err
	}
	// Held: nothing waits for its answer, and an error of its own fails the statement it is sent
	// with, in this transaction.
	return t.hold(`INSERT INTO jobs (id, type, queue, payload, priority, state, max_attempts, run_at,
		created_at, attempt_timeout_ns, metadata, rate_key)
		SELECT id, type, queue, payload, priority, state, max_attempts, run_at, created_at, timeout, metadata::jsonb,
			rate_key
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::integer[], $6::smallint[],
			$7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::text[])
			AS u(id, type, queue, payload, priority, state, max_attempts, run_at, created_at, timeout, metadata,
				rate_key)`,
		rows...)
}

// insertRows draws ids for ps (idCache), sets out to what becomes of each, creates the rows of
// their queues, and returns their columns, an array each, in the order the inserts' unnest
// reads them: id, type, queue, payload, priority, state, max_attempts, run_at, created_at,
// timeout, metadata, rate key.
func (t *tx) insertRows(ps []*store.JobInsertParams, out []store.JobInsertResult) ([]any, error) {
	ids, err := t.ids.take(t, len(ps))
	if err != nil {
		return nil, err
	}
	var (
		types, queues                   = make([]string, len(ps)), make([]string, len(ps))
		payloads                        = make([][]byte, len(ps))
		priorities, states, maxAttempts = make([]int32, len(ps)), make([]int16, len(ps)), make([]int32, len(ps))
		runAts, created, timeouts       = make([]int64, len(ps)), make([]int64, len(ps)), make([]int64, len(ps))
		metas                           = make([]*string, len(ps))
		rateKeys                        = make([]string, len(ps))
	)
	for i, p := range ps {
		var err error
		if metas[i], err = encodeMetadata(p.Metadata); err != nil {
			return nil, err
		}
		st := initialState(p)
		out[i] = store.JobInsertResult{ID: ids[i], State: st, RunAt: p.RunAt}
		types[i], queues[i], payloads[i] = p.Type, p.Queue, payloadOf(p)
		priorities[i], states[i], maxAttempts[i] = int32(p.Priority), int16(st), int32(p.MaxAttempts)
		runAts[i], created[i], timeouts[i] = nanos(p.RunAt), nanos(p.Now), int64(p.AttemptTimeout)
		rateKeys[i] = p.RateKey
	}
	for _, q := range queues {
		if err := t.ensureQueue(q); err != nil {
			return nil, err
		}
	}
	return []any{ids, types, queues, payloads, priorities, states, maxAttempts, runAts, created, timeouts, metas,
		rateKeys}, nil
}

// JobInsertOfferedAtCommit inserts ps with one statement, sent with COMMIT, that also leases
// each offered job whose lease goes ahead of nothing and past no rule (see store.Tx): the job
// is stored LEASED, as the lease's own statement would leave it, and never passes through
// PENDING, so no lease of another broker can see it. Checked in the statement, from its
// snapshot: the first entries at the job's priority or above of each read a lease of the
// offer's worker would make (aheadOfOffer), the queue's row and the type's breaker row.
func (t *tx) JobInsertOfferedAtCommit(ps []*store.JobInsertParams, offers []*store.JobOffer, got func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	if err := store.CheckOffers(ps, offers); err != nil {
		return nil, err
	}
	out := make([]store.JobInsertResult, len(ps))
	if len(ps) == 0 {
		got(nil, nil)
		return out, nil
	}
	args, err := t.insertRows(ps, out)
	if err != nil {
		return nil, err
	}
	var (
		offered         = make([]bool, len(ps))
		untils          = make([]int64, len(ps))
		workers, owners = make([]string, len(ps)), make([]string, len(ps))
		secrets         = make([]byte, job.SecretSize*len(ps))
	)
	ready, err := t.offersReadyTypes(offers)
	if err != nil {
		return nil, err
	}
	index := make(map[int64]int, len(ps))
	var scope offerScope
	for i, o := range offers {
		index[out[i].ID] = i
		if o == nil {
			continue
		}
		scope.add(i+1, o, ready)
		token, err := job.NewLeaseToken(0, o.Random)
		if err != nil {
			return nil, fmt.Errorf("lease token: %w", err)
		}
		copy(secrets[i*job.SecretSize:], token.Secret[:])
		offered[i], untils[i], workers[i], owners[i] = true, nanos(o.LeaseUntil), o.WorkerID, o.Owner
	}
	read := func(rows pgx.Rows) ([]*job.Job, error) {
		leased := make([]*job.Job, len(ps))
		jobs, err := scanJobs(rows, nil)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			i, ok := index[j.ID]
			if !ok {
				return nil, fmt.Errorf("offered insert returned job %d, not one of its own", j.ID)
			}
			leased[i] = j
		}
		return leased, nil
	}
	// Its plan is kept: left to choose, the server planned it anew on every call (0.6 ms a
	// plan, for a statement that runs in 0.1). It takes the settings of a write of many
	// (joinByKey), which the successes' write in the same group commit then keeps: its reads
	// are by key or of the ready indexes' first entries either way.
	if err := t.joinByKey(true); err != nil {
		return nil, err
	}
	args = append(args[:11:11], offered, untils, workers, owners, secrets, args[11], scope.n, scope.queues, scope.types)
	err = runRows(t, true, offeredInsertSQL, args, read, got)
	if err != nil {
		return nil, err
	}
	return out, t.joinByKey(false)
}

// secretSize is job.SecretSize in SQL: the statements that lease cut each job's secret out of
// one value holding them all.
var secretSize = strconv.Itoa(job.SecretSize)

// offerScope is what each offered job's worker takes, as JobInsertOfferedAtCommit's statement
// reads it: one row for each read a lease of the worker would make (store.PlanReads), naming
// the job (its 1-based place in the call) and the read's queue and type. An empty queue is
// every queue; an empty type, every ready job.
type offerScope struct {
	n             []int64
	queues, types []string
}

// add adds the reads of the worker offered the n-th job. A worker that names more queues than
// its reads by queue allow has each of its types read in every queue: more jobs than it takes,
// which an offer may count. A worker of more types than a lease reads one by one has those of
// them in ready (offersReadyTypes) read, as a lease of it reads them (store.NarrowsTypes); none
// of them ready, nothing waits ahead of its job.
func (s *offerScope) add(n int, o *store.JobOffer, ready map[string]bool) {
	read := func(queue, typ string) {
		s.n, s.queues, s.types = append(s.n, int64(n)), append(s.queues, queue), append(s.types, typ)
	}
	types := o.Types
	if store.NarrowsTypes(types) {
		types = slices.DeleteFunc(slices.Clone(types), func(t string) bool { return !ready[t] })
		if len(types) == 0 {
			return
		}
	}
	switch store.PlanReads(o.Queues, types) {
	case store.ReadByQueueAndType:
		for _, q := range o.Queues {
			for _, t := range types {
				read(q, t)
			}
		}
	case store.ReadByType:
		for _, t := range types {
			read("", t)
		}
	default:
		read("", "")
	}
}

// offersReadyTypes returns which types of the offers' workers of more types than a lease reads
// one by one have a ready job (readyTypes, one statement for them all), or nil when no worker
// has that many. Counted in jobs_ready instead, beside 100,000 jobs of another type, every
// offer to workers of 40 types was refused and the statement read past the backlog for each
// job: one producer at 1,000 jobs a second got 45 through. Read each, the types of a worker
// that have no job cost a read per offered job: with no backlog, 64 producers ran at a third
// of the rate. A job of a type left out that another broker commits before the insert's
// statement does not keep the offer back, as one committed after it would not.
func (t *tx) offersReadyTypes(offers []*store.JobOffer) (map[string]bool, error) {
	var types []string
	for _, o := range offers {
		if o != nil && store.NarrowsTypes(o.Types) {
			types = append(types, o.Types...)
		}
	}
	if len(types) == 0 {
		return nil, nil
	}
	slices.Sort(types)
	ready, err := t.readyTypes(slices.Compact(types))
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(ready))
	for _, typ := range ready {
		set[typ] = true
	}
	return set, nil
}

// offeredInsertSQL is JobInsertOfferedAtCommit's statement. A job is leased (state 3, its first
// token, the n-th secret) when it was offered and, in the statement's snapshot, no ready job
// that its worker could take waits with at least its priority (aheadOfOffer), its queue is
// neither paused nor capped, and its type's breaker is not shut; it returns the leased jobs
// only.
//
// The worker's ready jobs are read as a lease of it reads them (offerScope): each of its reads
// through jobs_ready_queue_type or jobs_ready_type, or jobs_ready for a worker with too many
// types that have ready jobs (offersReadyTypes). Counted in jobs_ready, a backlog no worker
// takes (a type no worker handles, a queue nobody serves) refused every offer, and each job
// then waited for a dispatch round. Each
// queue and type is an equality and a range, as in leaseQuery. The rows of u are
// materialized, so that each job's checks run once: inlined, they ran again for each of the
// four columns the insert takes from the job's lease.
var offeredInsertSQL = `WITH u AS MATERIALIZED (
		SELECT u.*, u.offered
			AND NOT EXISTS (SELECT 1 FROM unnest($18::bigint[], $19::text[], $20::text[]) AS s(n, queue, type)
				WHERE s.n = u.n AND CASE
				WHEN s.queue <> '' THEN ` + aheadOfOffer(`AND r.queue = s.queue AND r.queue >= s.queue AND r.queue <= s.queue
					AND r.type = s.type AND r.type >= s.type AND r.type <= s.type`) + `
				WHEN s.type <> '' THEN ` + aheadOfOffer(`AND r.type = s.type AND r.type >= s.type AND r.type <= s.type`) + `
				ELSE ` + aheadOfOffer(``) + ` END)
			AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = u.queue
				AND (queues.paused OR queues.concurrency_limit > 0))
			AND NOT EXISTS (SELECT 1 FROM breakers WHERE breakers.type = u.type AND breakers.shut)` +
	rateCountsOffer + ` AS lease
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::integer[], $6::smallint[],
			$7::integer[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::boolean[],
			$13::bigint[], $14::text[], $15::text[], $17::text[]) WITH ORDINALITY
			AS u(id, type, queue, payload, priority, state, max_attempts, run_at, created_at, timeout, metadata,
				offered, until, worker, owner, rate_key, n)),
	ins AS (INSERT INTO jobs (id, type, queue, payload, priority, state, max_attempts, run_at, created_at,
			attempt_timeout_ns, metadata, rate_key, lease_token, lease_secret, lease_expires_at, worker_id, lease_owner)
		SELECT id, type, queue, payload, priority, CASE WHEN lease THEN 3 ELSE state END, max_attempts, run_at,
			created_at, timeout, metadata::jsonb, rate_key, CASE WHEN lease THEN 1 ELSE 0 END,
			CASE WHEN lease THEN substring($16::bytea FROM ((n - 1) * ` + secretSize + ` + 1)::int FOR ` + secretSize + `) END,
			CASE WHEN lease THEN until END, CASE WHEN lease THEN worker ELSE '' END,
			CASE WHEN lease THEN owner ELSE '' END
		FROM u
		RETURNING ` + jobColumns + `)
	SELECT * FROM ins WHERE state = 3`

// aheadOfOffer is whether a ready job of one read of an offer's worker (the conditions read,
// on jobs r) waits ahead of the offered job u: one of at least its priority in a queue not
// paused, among the first store.PausedBacklogMin of the read's jobs at that priority or above,
// or that many jobs there at all. A paused queue's jobs do not wait for a worker, and a job of
// the same type held there kept every offer back, each job then waiting for a dispatch round;
// they are passed over only while few (a broker offers nothing while the paused queues hold
// more, JobLeaseParams.PausedBacklog), since each is read to be passed. Each read is in its
// index's order from its first entry and stops at the job's priority: written as EXISTS (...
// priority >= the job's) with no order, the plan the server kept, made while the table was
// empty, read a type's jobs through jobs_ready_queue_type, whole, by its second column
// (TestOfferPassesWhatItsWorkerDoesNotTake).
func aheadOfOffer(read string) string {
	return `EXISTS (SELECT FROM (SELECT r.queue, row_number() OVER (ORDER BY r.priority DESC) AS k
				FROM jobs r WHERE r.state = 2 ` + read + ` AND r.priority >= u.priority
				ORDER BY r.priority DESC LIMIT ` + strconv.Itoa(store.PausedBacklogMin) + `) AS h
			WHERE h.k = ` + strconv.Itoa(store.PausedBacklogMin) + ` OR NOT EXISTS (SELECT FROM queues q WHERE q.name = h.queue AND q.paused))`
}

// ensureQueue creates the queue's row on its first job.
func (t *tx) ensureQueue(name string) error {
	if t.queues.Known(name) || slices.Contains(t.newQueues, name) {
		return nil
	}
	if err := t.hold(`INSERT INTO queues (name) VALUES ($1) ON CONFLICT DO NOTHING`, name); err != nil {
		return err
	}
	t.newQueues = append(t.newQueues, name)
	return nil
}

func (t *tx) JobLease(p *store.JobLeaseParams) ([]*job.Job, error) {
	defer t.frontSafe()()
	if p.Limit <= 0 || len(p.Types) == 0 {
		return nil, nil
	}
	scope, caps, err := t.leaseScope(p)
	if err != nil || len(scope.Types) == 0 {
		return nil, err // no type left: each excluded, or none with a ready job (store.NarrowsTypes)
	}
	if p.Keyed {
		return t.leaseKeyed(scope, caps)
	}
	if len(caps) == 0 && p.Rates == nil {
		var leased []*job.Job
		err := t.leaseAtOnce(scope, []*store.JobLeaseParams{p}, false, func(out [][]*job.Job, _ error) { leased = out[0] })
		return leased, err
	}
	return t.leaseCapped(scope, caps)
}

// JobLeaseAtCommit sends the leases, one statement for them all, with COMMIT (see
// pipeTx.later): a dispatch round that leases in a transaction of its own then costs the round
// trips of its other statements only, and a round of many worker streams one statement, not one
// per stream. Leases that a queue cap can cut short read and lease at once, one by one, as
// JobLease does.
func (t *tx) JobLeaseAtCommit(ps []*store.JobLeaseParams, got func([][]*job.Job, error)) error {
	defer t.frontSafe()()
	if len(ps) == 0 {
		got(nil, nil)
		return nil
	}
	if err := store.CheckLeaseScope(ps); err != nil {
		return err
	}
	scope, caps, err := t.leaseScope(ps[0])
	if err != nil {
		return err
	}
	if len(scope.Types) == 0 { // no type left: each excluded, or none with a ready job
		got(make([][]*job.Job, len(ps)), nil)
		return nil
	}
	if len(caps) == 0 && !ps[0].Keyed && ps[0].Rates == nil {
		return t.leaseAtOnce(scope, ps, true, got)
	}
	out := make([][]*job.Job, len(ps))
	for i, p := range ps {
		if out[i], err = t.JobLease(p); err != nil {
			return err
		}
	}
	got(out, nil)
	return nil
}

// leaseScope is what a lease of p may take once the queues' rules are applied, and how many
// more jobs each capped queue may have leased (none capped: nil). With EnforceQueues, the room
// is counted in the database under the capped queues' locks, unless SkipCapped leaves their
// jobs out altogether.
func (t *tx) leaseScope(p *store.JobLeaseParams) (*store.JobLeaseParams, map[string]int, error) {
	scope := *p
	scope.Types, scope.ExcludeTypes = p.LeasedTypes(), nil // left out once, not in every read
	if store.NarrowsTypes(scope.Types) {
		ready, err := t.readyTypes(scope.Types)
		if err != nil {
			return nil, nil, err
		}
		scope.Types = ready // none: nothing to lease
	}
	if !p.EnforceQueues {
		return &scope, p.Caps, nil
	}
	scope.ExcludePaused = true
	var room map[string]int
	if !p.SkipCapped {
		var err error
		if room, err = t.queueRoom(); err != nil {
			return nil, nil, err
		}
		scope.ExcludeQueues = store.WithoutRoom(scope.ExcludeQueues, room)
	}
	if len(scope.Queues) == 0 && p.PausedBacklog {
		named, ok, err := t.readyQueuesBut(&scope)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case ok && len(named) == 0:
			scope.Types = nil // every queue with ready jobs is left out
		case ok:
			scope.Queues = named
		}
	}
	return &scope, room, nil
}

// readyQueuesBut names the queues a lease of every queue but the paused ones (and those of
// p.ExcludeQueues, and with p.SkipCapped the capped ones) may take from: those with ready
// jobs, less the ones left out. A lease that names them reads each of its types in each
// through jobs_ready_queue_type (leaseQuery), where one of every queue reads its types through
// jobs_ready_type and passes over their ready jobs in a paused queue, where a backlog waits:
// beside 100,000 such jobs of the same type, enqueue to start at 1,000/s took seconds. ok is
// false when more than store.MaxNamedQueues would be named. The queues with ready jobs are found by
// one step of jobs_ready_queue_type each (a loose index scan), so the cost follows the number
// of queues, not of their jobs: each step's first entry in order, which no other index gives
// without reading all of its entries.
func (t *tx) readyQueuesBut(p *store.JobLeaseParams) (names []string, ok bool, err error) {
	capped := ""
	if p.SkipCapped {
		capped = ` OR queues.concurrency_limit > 0`
	}
	rows, err := t.tx.Query(t.ctx, `WITH RECURSIVE ready(name) AS (
			(SELECT queue FROM jobs WHERE state = 2 ORDER BY queue LIMIT 1)
			UNION ALL
			SELECT (SELECT queue FROM jobs WHERE state = 2 AND queue > ready.name ORDER BY queue LIMIT 1)
			FROM ready WHERE ready.name IS NOT NULL)
		SELECT name FROM ready WHERE name IS NOT NULL AND NOT (name = ANY($1))
			AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = ready.name AND (queues.paused`+capped+`))
		LIMIT $2`, append([]string{}, p.ExcludeQueues...), store.MaxNamedQueues+1)
	if err != nil {
		return nil, false, err
	}
	if names, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, false, err
	}
	if len(names) > store.MaxNamedQueues {
		return nil, false, nil
	}
	return names, true, nil
}

// readyTypesSQL keeps, of the types $1, those with a ready job, in their order: one probe of
// jobs_ready_type each (TestReadyTypesProbeEachType).
const readyTypesSQL = `SELECT u.type FROM unnest($1::text[]) WITH ORDINALITY AS u(type, n)
	WHERE EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND jobs.type = u.type)
	ORDER BY u.n`

// readyTypes narrows types to those with a ready job (store.NarrowsTypes). A type with no
// ready job in the statement's snapshot has none for the lease that follows to take, but for
// jobs committed in between by another transaction, which the next dispatch round finds.
func (t *tx) readyTypes(types []string) ([]string, error) {
	rows, err := t.tx.Query(t.ctx, readyTypesSQL, types)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// leaseCapped leases what p asks for where caps, shared by the leases of the transaction, can
// cut it short: it reads the ready jobs in dispatch order, locking them (SKIP LOCKED: rows
// another transaction holds are someone else's), then leases them with one statement. A capped
// queue drops out the moment its room is used up: the read then starts again without it.
func (t *tx) leaseCapped(p *store.JobLeaseParams, caps map[string]int) ([]*job.Job, error) {
	scope := *p
	var leased []*job.Job
	bytes := 0 // payloads leased so far (MaxBytes)
	gate, err := t.rateGate(p)
	if err != nil {
		return nil, err
	}
	if err := t.readInDispatchOrder(true); err != nil {
		return nil, err
	}
	for len(leased) < p.Limit && (p.MaxBytes <= 0 || bytes < p.MaxBytes) {
		q := leaseQuery(&scope, p.Limit-len(leased), leased, jobColumns)
		jobs, err := t.queryJobs(q.sql.String(), q.args...)
		if err != nil {
			return nil, err
		}
		if err := t.rateLoad(gate, store.JobBuckets(gate, jobs)); err != nil {
			return nil, err
		}
		full := ""
		var held *ratelimit.Hold // a rate limit's bucket this lease found empty
		for _, j := range jobs {
			if p.MaxBytes > 0 && bytes >= p.MaxBytes {
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
			token, err := job.NewLeaseToken(j.LeaseToken.Seq, p.Random)
			if err != nil {
				return nil, err
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
		if held != nil {
			// Read again without the bucket's jobs: the ones after them may go.
			scope.ExcludeRated = append(slices.Clone(scope.ExcludeRated), *held)
			continue
		}
		if full == "" {
			break // every ready job in scope was read, or the limit is reached
		}
		if !scope.DropQueue(full) {
			break
		}
	}
	if err := t.readInDispatchOrder(false); err != nil {
		return nil, err
	}
	if err := t.rateSave(gate, p.Rates); err != nil {
		return nil, err
	}
	if len(leased) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(leased))
	seqs := make([]int64, len(leased))
	secrets := make([][]byte, len(leased))
	for i, j := range leased {
		ids[i], seqs[i], secrets[i] = j.ID, j.LeaseToken.Seq, j.LeaseToken.Secret[:]
	}
	if err := t.joinByKey(true); err != nil {
		return nil, err
	}
	n, err := t.exec(leaseSQL, ids, seqs, secrets, nanos(p.LeaseUntil), p.WorkerID, p.Owner)
	if err != nil {
		return nil, err
	}
	if err := t.joinByKey(false); err != nil {
		return nil, err
	}
	if int(n) != len(leased) {
		// The rows are locked by this transaction since the read: nothing else can change them.
		return nil, fmt.Errorf("leased %d of %d jobs: they changed while being leased", n, len(leased))
	}
	return leased, nil
}

// leaseAtOnce leases what ps ask for, all of scope, with one statement (leaseAtOnceSQL), when
// no queue cap can cut the leases short, sent at once or, later, with COMMIT (runRows), and
// hands got each lease's jobs in dispatch order.
func (t *tx) leaseAtOnce(scope *store.JobLeaseParams, ps []*store.JobLeaseParams, later bool, got func([][]*job.Job, error)) error {
	var began time.Time
	sql, args, shape, err := leaseAtOnceSQL(scope, ps, func(shape string) (front, bool) {
		fr, at, ok := t.fronts.get(shape)
		began = at
		return fr, ok
	})
	if sql == "" || err != nil {
		if err == nil {
			got(make([][]*job.Job, len(ps)), nil)
		}
		return err
	}
	if err := t.leaseSettings(true); err != nil {
		return err
	}
	read := func(rows pgx.Rows) ([][]*job.Job, error) {
		jobs, picked, err := scanLeased(rows, len(ps))
		if err == nil {
			t.leasedFrom(shape, began, jobs, picked)
		}
		return jobs, err
	}
	if err := runRows(t, later, sql, args, read, got); err != nil {
		return err
	}
	return t.leaseSettings(false)
}

// leaseAtOnceSQL is one statement that selects and locks the ready jobs the leases ps may take
// (all of scope, the leases' scope with the queues' rules applied) in dispatch order
// (leaseQuery), and leases them: the first ps[0].Limit to the first lease, the next to the
// second, and so on. One round trip, where reading the jobs and then leasing them took two, and
// one statement for every worker stream of a round. Each job's token is its last one's number
// plus one, with a secret drawn from ps[0].Random. A lease's jobs past its MaxBytes, counted in
// dispatch order, are left ready (locked by the transaction until it ends, as read, but not
// leased). The statement returns each job with the 1-based number of its lease and the number
// of jobs it read (scanLeased). It reads past the front of its shape when from knows one
// (front.go), and returns the shape. An empty sql: nothing to lease.
func leaseAtOnceSQL(scope *store.JobLeaseParams, ps []*store.JobLeaseParams, from func(string) (front, bool)) (sql string, args []any, shape string, err error) {
	total := 0
	starts := make([]int64, len(ps)) // the first row number of each lease's jobs
	untils, maxBytes := make([]int64, len(ps)), make([]int64, len(ps))
	workers, owners := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		starts[i] = int64(total + 1)
		total += max(p.Limit, 0)
		untils[i], workers[i], owners[i] = nanos(p.LeaseUntil), p.WorkerID, p.Owner
		maxBytes[i] = math.MaxInt64
		if p.MaxBytes > 0 {
			maxBytes[i] = int64(p.MaxBytes)
		}
	}
	if total == 0 {
		return "", nil, "", nil
	}
	random := ps[0].Random
	if random == nil {
		random = rand.Reader
	}
	// One secret for each job the leases may take, drawn at once and sent as one value: the
	// n-th job gets the n-th 16 bytes. Drawn one by one, and sent as an array, the secrets of a
	// round that takes a few jobs of a limit of hundreds cost more than its lease.
	secrets := make([]byte, job.SecretSize*total)
	if _, err := io.ReadFull(random, secrets); err != nil {
		return "", nil, "", fmt.Errorf("lease token: read random secrets: %w", err)
	}
	q, shape := buildLease(scope, total, nil, `id, priority, run_at, octet_length(payload) AS size`, from)
	sql = `WITH picked AS (` + q.sql.String() + `),
	numbered AS (SELECT id, size, row_number() OVER (ORDER BY priority DESC, run_at, id) AS n FROM picked),
	shared AS (SELECT id, size, n, width_bucket(n, ` + q.arg(starts) + `::bigint[]) AS i FROM numbered),
	sized AS (SELECT id, n, i, sum(size) OVER (PARTITION BY i ORDER BY n ROWS UNBOUNDED PRECEDING) - size AS before
		FROM shared)
	UPDATE jobs SET state = 3, lease_token = jobs.lease_token + 1,
		lease_secret = substring(` + q.arg(secrets) + `::bytea FROM ((sized.n - 1) * ` + secretSize + ` + 1)::int FOR ` + secretSize + `),
		lease_expires_at = (` + q.arg(untils) + `::bigint[])[sized.i],
		worker_id = (` + q.arg(workers) + `::text[])[sized.i], lease_owner = (` + q.arg(owners) + `::text[])[sized.i]
	FROM sized WHERE jobs.id = sized.id AND jobs.state + 0 = 2 AND sized.before < (` + q.arg(maxBytes) + `::bigint[])[sized.i]
	RETURNING ` + leasedColumns + `, sized.i, (SELECT count(*) FROM picked)`
	return sql, q.args, shape, nil
}

// scanLeased reads the rows of leaseAtOnceSQL's statement into the jobs of each of its n
// leases, each in dispatch order, and closes them. picked is how many jobs the statement read
// (some may be left ready, past a lease's MaxBytes); 0 when it leased none.
func scanLeased(rows pgx.Rows, n int) (out [][]*job.Job, picked int64, err error) {
	defer rows.Close()
	out = make([][]*job.Job, n)
	for rows.Next() {
		var i int
		j, err := scanJob(withExtra{rows, []any{&i, &picked}})
		if err != nil {
			return nil, 0, err
		}
		if i < 1 || i > n {
			return nil, 0, fmt.Errorf("job %d leased for lease %d of %d", j.ID, i, n)
		}
		out[i-1] = append(out[i-1], j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	for _, jobs := range out {
		sortForDispatch(jobs)
	}
	return out, picked, nil
}

// withExtra is a row whose Scan reads more columns, after the ones asked for, into extra.
type withExtra struct {
	pgx.Row
	extra []any
}

func (r withExtra) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// leaseSettings turns the planner settings a lease's statement needs on before it and off
// after it (readInDispatchOrder, joinByKey); they ride with the statements around them.
func (t *tx) leaseSettings(on bool) error { return t.plannerOff(on, leaseOff...) }

// leaseOff are the settings a lease's one statement turns off: readInDispatchOrder's and
// joinByKey's.
var leaseOff = append([]string{"enable_sort"}, keyJoinOff...)

// sortForDispatch puts leased jobs in dispatch order: an UPDATE returns them in any order.
func sortForDispatch(jobs []*job.Job) { slices.SortFunc(jobs, dispatchOrder) }

// dispatchOrder compares two jobs in dispatch order: priority DESC, run_at, id.
func dispatchOrder(a, b *job.Job) int {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
}

// leasedColumns are jobColumns as the lease's UPDATE returns them, of the jobs it changed.
var leasedColumns = func() string {
	cols := strings.Split(jobColumns, ",")
	for i, c := range cols {
		cols[i] = "jobs." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}()

// leaseQuery selects and locks up to limit ready jobs p may lease, in dispatch order, reading
// cols of each. Jobs of taken, read by an earlier round of this lease, are left out.
//
// It reads the jobs as store.PlanReads says: each of the lease's types in each of its queues
// through jobs_ready_queue_type, or each type through jobs_ready_type, so that it passes over
// no job it cannot take. Read from jobs_ready, a backlog that no lease takes (a type no worker
// handles, one whose breaker is open and which the lease leaves out, a queue nobody serves)
// was passed over by every lease: beside 200,000 such jobs, a lease of 100 jobs of three types
// took 55 ms, against 0.6 ms read by type (EXPLAIN ANALYZE). One read locks what it reads
// (FOR UPDATE SKIP LOCKED). Several cannot be merged and locked in one read (FOR UPDATE is not
// allowed with UNION, and a locked subquery loses its order), so the reads give their jobs
// unlocked and merged in dispatch order, and each is locked as the merge reaches it, skipped
// if another transaction holds it or it is no longer ready: the lease locks only the jobs it
// takes, as one read does (TestLeaseOfSeveralTypesReadsOnlyTheirTypes).
func leaseQuery(p *store.JobLeaseParams, limit int, taken []*job.Job, cols string) *query {
	q, _ := buildLease(p, limit, taken, cols, nil)
	return q
}

// buildLease is leaseQuery, reading past the front of the lease's shape when from knows one
// (front.go). It returns the shape too: "" when from is nil or the lease has none.
func buildLease(p *store.JobLeaseParams, limit int, taken []*job.Job, cols string, from func(shape string) (front, bool)) (*query, string) {
	q := &query{}
	types := p.Types          // leaseScope left the excluded ones out
	var rules strings.Builder // the conditions besides the reads' own, written in every read
	if len(taken) > 0 {
		ids := make([]int64, len(taken))
		for i, j := range taken {
			ids[i] = j.ID
		}
		rules.WriteString(` AND NOT (id = ANY(` + q.arg(ids) + `))`)
	}
	// Each read's condition: an equality the planner matches to the read's index, and the
	// same value as a range, which changes no row but the plan the server keeps: a generic plan
	// cannot see the value, and guesses that an equality matches its share of the ready jobs,
	// all of them when the statistics know of one queue or type only (a backlog's); it then
	// read jobs_ready as well, and passed over the backlog, 280-900 ms a lease beside a million
	// jobs, the leases falling minutes behind (auto_explain). A range of a parameter is guessed
	// at a 200th of the rows, which leaves the read's index the cheaper
	// (TestLeaseOfOneQueueReadsOnlyItsQueue, TestLeaseOfOneTypeReadsOnlyItsType).
	is := func(column, value string) string {
		return ` AND ` + column + ` = ` + value + ` AND ` + column + ` >= ` + value + ` AND ` + column + ` <= ` + value
	}
	var reads []string
	switch store.PlanReads(p.Queues, types) {
	case store.ReadByQueueAndType:
		typeArgs := make([]string, len(types))
		for i, t := range types {
			typeArgs[i] = q.arg(t)
		}
		for _, queue := range p.Queues {
			queueArg := q.arg(queue)
			for _, t := range typeArgs {
				reads = append(reads, is("queue", queueArg)+is("type", t))
			}
		}
	case store.ReadByType:
		for _, t := range types {
			reads = append(reads, is("type", q.arg(t)))
		}
		if len(p.Queues) > 0 {
			rules.WriteString(` AND queue = ANY(` + q.arg(p.Queues) + `)`)
		}
	default:
		rules.WriteString(typeWhere(q, p))
		reads = []string{""}
	}
	rules.WriteString(ruleWhere(q, p))
	if !p.Keyed {
		// A lease that does not honour concurrency keys leaves the keyed jobs out (keyconc.go).
		rules.WriteString(` AND concurrency_key = ''`)
	}
	const order = ` ORDER BY priority DESC, run_at, id`
	shape := ""
	if from != nil {
		shape = shapeOf(reads, rules.String(), q.args)
		if fr, ok := from(shape); ok && shape != "" {
			reads = pastFront(q, reads, fr)
		}
	}
	if len(reads) == 1 {
		q.sql.WriteString(`SELECT ` + cols + ` FROM jobs WHERE state = 2` + reads[0] + rules.String() + order +
			` LIMIT ` + q.arg(limit) + ` FOR UPDATE SKIP LOCKED`)
		return q, shape
	}
	q.sql.WriteString(`SELECT j.* FROM (`)
	for i, r := range reads {
		if i > 0 {
			q.sql.WriteString(` UNION ALL `)
		}
		// Each read in dispatch order: its ORDER BY lets the planner merge them (Merge
		// Append), where without it PostgreSQL appends them and sorts every job they read.
		q.sql.WriteString(`(SELECT ctid, id, priority, run_at FROM jobs WHERE state = 2` + r + rules.String() + order + `)`)
	}
	// Each job is locked where the read found it (its ctid): a scan of that one row, which no
	// statistics can turn into another plan. By its id, planned on statistics that saw few
	// ready jobs, the lock read jobs_ready_type whole for each job, by the id in its last
	// column (1.5 ms a job: 0.8x the jobs a second with batches of 100). A job another
	// transaction has leased since the read is no longer ready: the lock follows it to its new
	// version, which state = 2 refuses.
	q.sql.WriteString(`) c CROSS JOIN LATERAL (SELECT ` + cols + ` FROM jobs WHERE jobs.ctid = c.ctid AND jobs.state = 2
		FOR UPDATE SKIP LOCKED) j ORDER BY c.priority DESC, c.run_at, c.id LIMIT ` + q.arg(limit))
	return q, shape
}

// leaseWhere writes the conditions on ready jobs (of table jobs) that p's scope and rules add.
func leaseWhere(q *query, p *store.JobLeaseParams) {
	q.sql.WriteString(typeWhere(q, p) + ruleWhere(q, p))
}

// typeWhere is the condition on the types and queues of p's scope, for a read of every ready
// job (jobs_ready).
func typeWhere(q *query, p *store.JobLeaseParams) string {
	var w strings.Builder
	w.WriteString(` AND type = ANY(` + q.arg(p.Types) + `)`)
	if len(p.ExcludeTypes) > 0 {
		w.WriteString(` AND NOT (type = ANY(` + q.arg(p.ExcludeTypes) + `))`)
	}
	if len(p.Queues) > 0 {
		w.WriteString(` AND queue = ANY(` + q.arg(p.Queues) + `)`)
	}
	return w.String()
}

// ruleWhere is the condition the queues' and types' rules add: the queues left out (capped,
// paused), the types whose breaker is shut, the rate limits' empty buckets.
func ruleWhere(q *query, p *store.JobLeaseParams) string {
	var w strings.Builder
	if len(p.ExcludeQueues) > 0 {
		w.WriteString(` AND NOT (queue = ANY(` + q.arg(p.ExcludeQueues) + `))`)
	}
	switch {
	case p.EnforceQueues && p.SkipCapped:
		w.WriteString(` AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue
			AND (queues.paused OR queues.concurrency_limit > 0))`)
	case p.ExcludePaused:
		w.WriteString(` AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue AND queues.paused)`)
	}
	if p.ExcludeShut {
		w.WriteString(` AND NOT EXISTS (SELECT 1 FROM breakers WHERE breakers.type = jobs.type AND breakers.shut)`)
	}
	for _, h := range p.ExcludeRated {
		w.WriteString(store.RateExclusion(h, q.arg))
	}
	return w.String()
}

func (t *tx) JobStart(p *store.JobStartParams) (bool, error) {
	n, err := t.exec(`UPDATE jobs SET state = 4, attempts = attempts + 1, started_at = $1,
		lease_expires_at = $2, attempt_deadline = $3
		WHERE id = $4 AND lease_token = $5 AND lease_secret = $6 AND state = 3
		AND lease_expires_at > $1`,
		nanos(p.Now), nanos(p.LeaseUntil), nanos(p.AttemptDeadline), p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:])
	if err != nil || n == 1 {
		return n == 1, err
	}
	return t.alreadyApplied(p.Ref, job.StateRunning, p.Attempt)
}

func (t *tx) JobFinish(p *store.JobFinishParams) (bool, error) {
	t.batches.Finished(p)
	var finished *int64
	if p.State.Final() {
		finished = nullNanos(p.Now)
	}
	var runAt *int64
	if p.State == job.StateScheduled || p.State == job.StatePending {
		runAt = nullNanos(p.RunAt)
	}
	a := p.Attempt
	if a.Outcome == job.OutcomeSucceeded {
		// The successful attempt needs no row of its own: the job row holds its worker, start,
		// end and number, and JobGet reports it from there.
		n, err := t.exec(`UPDATE jobs SET state = 5, attempts = $1, finished_at = $2, started_at = $3, result = $7
			WHERE id = $4 AND lease_token = $5 AND lease_secret = $6 AND state IN (3, 4)`,
			a.Number, finished, nanos(a.StartedAt), p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:], resultArg(p.Result))
		if err != nil {
			return false, err
		}
		if n == 1 {
			t.settle.add(p.Ref.JobID, p.Now)
			err := t.addFinished(p.Queue, p.Type, job.StateSucceeded, 1)
			return err == nil, err
		}
		return t.alreadyApplied(p.Ref, p.State, a.Number)
	}
	var base int
	err := t.tx.QueryRow(t.ctx, `UPDATE jobs SET state = $1, attempts = $2, run_at = COALESCE($3, run_at),
			finished_at = $4, dead_reason = $5,
			last_error_type = CASE WHEN $6 = '' THEN last_error_type ELSE $6 END,
			last_error_message = CASE WHEN $6 = '' THEN last_error_message ELSE $7 END
			WHERE id = $8 AND lease_token = $9 AND lease_secret = $10 AND state IN (3, 4) RETURNING attempt_base`,
		int16(p.State), a.Number, runAt, finished, int16(p.DeadReason), a.ErrorType, a.Message,
		p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:]).Scan(&base)
	if errors.Is(err, pgx.ErrNoRows) {
		return t.alreadyApplied(p.Ref, p.State, a.Number)
	}
	if err != nil {
		return false, err
	}
	if p.State.Final() {
		t.settle.addFailed(p.Ref.JobID, p.Now)
		if err := t.addFinished(p.Queue, p.Type, p.State, 1); err != nil {
			return false, err
		}
	}
	if p.Unstarted {
		return true, nil
	}
	err = t.hold(`INSERT INTO attempts (job_id, number, worker_id, started_at, finished_at, outcome,
		failure_kind, error_type, message, details) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (job_id, number) DO UPDATE SET finished_at = excluded.finished_at,
		outcome = excluded.outcome, failure_kind = excluded.failure_kind,
		error_type = excluded.error_type, message = excluded.message, details = excluded.details`,
		p.Ref.JobID, base+a.Number, a.WorkerID, nanos(a.StartedAt), nanos(a.FinishedAt), int16(a.Outcome),
		int16(a.FailureKind), a.ErrorType, a.Message, a.Details)
	return err == nil, err
}

// extendLeasesSQL moves the expiry of many leases (see joinByKey).
const extendLeasesSQL = `UPDATE jobs SET lease_expires_at = $4
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS u(id, seq, secret)
	WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 IN (3, 4)
		AND jobs.lease_expires_at > $5
	RETURNING jobs.id, jobs.lease_token, jobs.lease_secret`

// leaseSQL leases the jobs a lease's read locked, each with its token (see joinByKey).
const leaseSQL = `UPDATE jobs SET state = 3, lease_token = u.seq, lease_secret = u.secret, lease_expires_at = $4,
	worker_id = $5, lease_owner = $6
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS u(id, seq, secret)
	WHERE jobs.id = u.id AND jobs.state + 0 = 2`

// succeedManySQL stores successes fenced by their leases, adds them to the finished totals by
// the jobs' own queue and type (a lease listed twice changes its job once and is counted
// once), with the transaction's other changes to the totals ($7 to $10, see totals.go),
// and says which of them are applied: a row (ordinal,
// true) for each stored now, and for each of the others a row (ordinal, whether the job, as the
// statement's snapshot shows it, holds the success already: store.LeaseState.Applied); the
// snapshot does not show the UPDATE's own changes. appliedOf joins the two. (Joining the
// UPDATE's rows to the writes in SQL would rescan them once per write under joinByKey's
// settings; NOT IN is hashed, and only the writes not stored now are looked up again.) Its jobs
// are locked before it, in id order (lockLeases): it waits for none of them, and its snapshot,
// taken after the locks, shows the successes another broker stored while they waited.
var succeedManySQL = `WITH u AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::integer[], $5::bigint[], $6::bigint[], $11::bytea[])
		WITH ORDINALITY AS u(id, seq, secret, attempts, started, finished, result, ord)
), done AS (
	UPDATE jobs SET state = 5, attempts = u.attempts, started_at = u.started, finished_at = u.finished,
		result = u.result
	FROM u
	WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 IN (3, 4)
	RETURNING u.ord, jobs.queue, jobs.type
), totals AS (
	INSERT INTO finished_totals (queue, type, state, n)
	SELECT queue, type, state, sum(n)::bigint FROM (
		SELECT queue, type, 5::smallint AS state, 1::bigint AS n FROM done
		UNION ALL
		SELECT * FROM unnest($7::text[], $8::text[], $9::smallint[], $10::bigint[])) f
	GROUP BY queue, type, state
	ORDER BY ` + finishedOrder + `
	ON CONFLICT (queue, type, state) DO UPDATE SET n = finished_totals.n + excluded.n
)
SELECT ord, true FROM done
UNION ALL
SELECT u.ord, j.state = 5 AND j.lease_token = u.seq AND j.lease_secret = u.secret AND j.attempts = u.attempts
FROM u JOIN jobs j ON j.id = u.id WHERE u.ord NOT IN (SELECT ord FROM done)`

// JobSucceedMany writes a batch of successes with one statement, which also says which of them
// were stored before.
func (t *tx) JobSucceedMany(ps []*store.JobFinishParams) ([]bool, error) {
	var applied []bool
	err := t.succeedMany(ps, false, func(a []bool, _ error) { applied = a })
	return applied, err
}

// JobSucceedManyAtCommit sends JobSucceedMany's statement with COMMIT (pipeTx.later): a group
// commit that stores successes and leases at commit then costs one round trip.
func (t *tx) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	return t.succeedMany(ps, true, got)
}

// succeedMany runs succeedManySQL for ps, at once or, later, with COMMIT (runRows).
func (t *tx) succeedMany(ps []*store.JobFinishParams, later bool, got func([]bool, error)) error {
	defer t.frontSafe()()
	if len(ps) == 0 {
		got(nil, nil)
		return nil
	}
	t.batches.Finished(ps...)
	if err := t.joinByKey(true); err != nil {
		return err
	}
	ids, seqs, secrets := leaseArrays(len(ps), func(i int) job.LeaseRef { return ps[i].Ref })
	if err := t.lockLeases(ids, seqs, secrets); err != nil {
		return err
	}
	for _, p := range ps {
		t.settle.add(p.Ref.JobID, p.Now) // applied or not: settling reads the jobs' states
	}
	read := func(rows pgx.Rows) ([]bool, error) { return appliedOf(rows, ps) }
	// The statement writes the transaction's totals: what it adds and what was held until now.
	args := append(succeedManyArgs(ps, ids, seqs, secrets), t.takeFinished()...)
	args = append(args, resultsOf(ps))
	if err := runRows(t, later, succeedManySQL, args, read, got); err != nil {
		return err
	}
	return t.joinByKey(false)
}

// succeedManyArgs are succeedManySQL's arguments for ps, whose leases are ids, seqs and secrets
// (leaseArrays).
func succeedManyArgs(ps []*store.JobFinishParams, ids, seqs []int64, secrets [][]byte) []any {
	attempts := make([]int32, len(ps))
	started, finished := make([]int64, len(ps)), make([]int64, len(ps))
	for i, p := range ps {
		attempts[i], started[i], finished[i] = int32(p.Attempt.Number), nanos(p.Attempt.StartedAt), nanos(p.Now)
	}
	return []any{ids, seqs, secrets, attempts, started, finished}
}

// appliedOf reads succeedManySQL's rows for ps, and closes them: a success is applied if a row
// says so, and a lease listed twice, stored once, is applied both times.
func appliedOf(rows pgx.Rows, ps []*store.JobFinishParams) ([]bool, error) {
	defer rows.Close()
	byRef := make(map[job.LeaseRef]bool, len(ps))
	for rows.Next() {
		var ord int64
		var ok bool
		if err := rows.Scan(&ord, &ok); err != nil {
			return nil, err
		}
		if ord < 1 || ord > int64(len(ps)) {
			return nil, fmt.Errorf("answer for write %d of %d", ord, len(ps))
		}
		if ok {
			byRef[ps[ord-1].Ref] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	applied := make([]bool, len(ps))
	for i, p := range ps {
		applied[i] = byRef[p.Ref]
	}
	return applied, nil
}

func (t *tx) JobRelease(ref job.LeaseRef) (bool, error) {
	n, err := t.exec(`UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = ''
		WHERE id = $1 AND lease_token = $2 AND lease_secret = $3 AND state = 3`, ref.JobID, ref.Token.Seq, ref.Token.Secret[:])
	if err != nil || n == 1 {
		return n == 1, err
	}
	return t.releasedAlready(ref)
}

func (t *tx) JobExtendLeases(refs []job.LeaseRef, now, until time.Time) ([]job.LeaseRef, error) {
	defer t.frontSafe()()
	if len(refs) == 0 {
		return nil, nil
	}
	ids, seqs, secrets := leaseArrays(len(refs), func(i int) job.LeaseRef { return refs[i] })
	extended, err := t.updateLeases(extendLeasesSQL, ids, seqs, secrets, nanos(until), nanos(now))
	if err != nil {
		return nil, err
	}
	var out []job.LeaseRef
	for _, r := range refs {
		if extended[r] {
			out = append(out, r)
			delete(extended, r)
		}
	}
	return out, nil
}

// collectRefs reads rows of (id, lease_token, lease_secret) as the leases they name, and closes
// them.
func collectRefs(rows pgx.Rows) (map[job.LeaseRef]bool, error) {
	defer rows.Close()
	out := map[job.LeaseRef]bool{}
	for rows.Next() {
		var ref job.LeaseRef
		var secret []byte
		if err := rows.Scan(&ref.JobID, &ref.Token.Seq, &secret); err != nil {
			return nil, err
		}
		copy(ref.Token.Secret[:], secret)
		out[ref] = true
	}
	return out, rows.Err()
}

func (t *tx) JobGetHeld(ref job.LeaseRef) (*job.Job, error) {
	jobs, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = $1 AND lease_token = $2 AND lease_secret = $3 AND state IN (3, 4)`,
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
	jobs, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = $1 FOR UPDATE`, id)
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
	if _, err := t.exec(`UPDATE jobs SET state = 7, finished_at = $1, lease_expires_at = NULL,
		attempt_deadline = NULL, started_at = NULL WHERE id = $2`, nanos(now), id); err != nil {
		return nil, err
	}
	t.settle.addFailed(id, now)
	if err := t.addFinished(before.Queue, before.Type, job.StateCancelled, 1); err != nil {
		return nil, err
	}
	t.batches.Add(before.BatchID, id, now)
	if before.State == job.StateRunning {
		_, err = t.exec(`INSERT INTO attempts (job_id, number, worker_id, started_at, finished_at, outcome,
			message) VALUES ($1, $2, $3, $4, $5, $6, 'cancelled while running') ON CONFLICT DO NOTHING`,
			id, before.AttemptBase+before.Attempts, before.WorkerID, nanos(before.StartedAt), nanos(now), int16(job.OutcomeCancelled))
	}
	return before, err
}

func (t *tx) JobPromoteScheduled(now time.Time) (int, error) {
	// Asked every second or so, it mostly finds nothing due: then it leaves the fronts of the
	// ready indexes be (front.go).
	defer t.frontSafe()()
	// The due jobs are locked first, in id order (lockorder.go).
	n, err := t.exec(`WITH due AS MATERIALIZED (
			SELECT id FROM jobs WHERE state = 1 AND run_at <= $1 ORDER BY id FOR NO KEY UPDATE)
		UPDATE jobs SET state = 2 FROM due WHERE jobs.id = due.id AND jobs.state = 1`, nanos(now))
	if n != 0 {
		t.readied()
	}
	return int(n), err
}

func (t *tx) JobNextScheduledAt() (time.Time, bool, error) {
	defer t.frontSafe()() // a read
	var at *int64
	if err := t.tx.QueryRow(t.ctx, `SELECT MIN(run_at) FROM jobs WHERE state = 1`).Scan(&at); err != nil {
		return time.Time{}, false, err
	}
	return fromNull(at), at != nil, nil
}

// heldExpiredSQL lists the held jobs whose lease ran out, or whose attempt outlived its
// timeout, in id order.
const heldExpiredSQL = `SELECT ` + jobColumns + ` FROM jobs WHERE state IN (3, 4)
	AND (lease_expires_at <= $1 OR (state = 4 AND attempt_deadline <= $1)) ORDER BY id LIMIT $2`

// JobHeldExpired reads the held jobs with bitmap scans off (readHeldByIndex).
func (t *tx) JobHeldExpired(now time.Time, limit int) ([]*job.Job, error) {
	defer t.frontSafe()() // a read
	if err := t.readHeldByIndex(true); err != nil {
		return nil, err
	}
	jobs, err := t.queryJobs(heldExpiredSQL, nanos(now), limit)
	if err != nil {
		return nil, err
	}
	return jobs, t.readHeldByIndex(false)
}

func (t *tx) JobListRunning() ([]*job.Job, error) {
	return t.queryJobs(`SELECT ` + listColumns + ` FROM jobs WHERE state = 4 ORDER BY id`)
}

func (t *tx) JobReleaseAllLeased() (int, error) {
	n, err := t.exec(`UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = '' WHERE state = 3`)
	return int(n), err
}

// alreadyApplied reports whether a write fenced by ref that matched no row is already stored
// (store.LeaseState.Applied).
func (t *tx) alreadyApplied(ref job.LeaseRef, state job.State, attempts int) (bool, error) {
	ls, err := t.leaseState(ref.JobID)
	return err == nil && ls.Applied(ref, state, attempts), err
}

// leaseState reads what a fenced write that matched no row needs of its job.
func (t *tx) leaseState(id int64) (store.LeaseState, error) {
	var st int16
	var ls store.LeaseState
	var secret []byte
	err := t.tx.QueryRow(t.ctx, `SELECT state, attempts, lease_token, lease_secret FROM jobs WHERE id = $1`, id).
		Scan(&st, &ls.Attempts, &ls.Token.Seq, &secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.LeaseState{}, nil
	}
	if err != nil {
		return store.LeaseState{}, err
	}
	ls.State = job.State(st)
	copy(ls.Token.Secret[:], secret)
	return ls, nil
}

// addFinished adds n (negative: takes) to the total of finished jobs in one queue, type and
// state: when the transaction writes its totals (totals.go).
func (t *tx) addFinished(queue, typ string, state job.State, n int) error {
	if queue == "" || typ == "" {
		return fmt.Errorf("finished totals: a job of queue %q and type %q", queue, typ)
	}
	t.finished = append(t.finished, finishedChange{queue: queue, typ: typ, state: int16(state), n: int64(n)})
	return nil
}
