// Package store defines the broker's durable storage: a narrow interface that the SQLite store
// implements today and a PostgreSQL store can implement for multi-broker deployments.
//
// Every write goes through Store.Write, which runs a function in one transaction. The broker
// batches many small operations (enqueues, leases, results) into one call, so one commit
// carries many jobs: this is the group commit that keeps per-job cost low.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
)

// ErrNotFound is returned when a job (or other record) does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnavailable is matched by the errors of a store that cannot use its storage for a reason
// outside the broker that an operator can fix, and after which the call can be repeated: a disk
// I/O error, a read-only or full disk, a file that cannot be opened. The failed write was
// rolled back. Each store decides which of its errors those are (see docs/storage.md).
var ErrUnavailable = errors.New("storage unavailable")

// Store is durable storage for jobs.
type Store interface {
	ConcurrencyReader
	// Write runs fn in one write transaction and commits it. op names the operation for
	// logs and counters. fn may be run more than once when storage is briefly busy, so it
	// must only write through tx and set its results afresh on each run.
	//
	// Write is idempotent under "committed, but reported failed": once a run of fn has
	// committed, fn is never run again for the same call, even when that commit was reported
	// as a failure (a lost acknowledgement) and the storage retry policy tries again. Write
	// then returns nil, and what fn set in the run that committed is the call's result. This
	// is the one rule that makes every write the broker retries safe; docs/storage.md says what
	// it means for each kind of write. The writes fenced by a lease apply the same rule on
	// their own (see Tx), for a worker that sends a message again after an ambiguous failure.
	Write(ctx context.Context, op string, fn func(tx Tx) error) error

	// JobGet reads one job with its attempt history.
	JobGet(ctx context.Context, id int64) (*job.Job, error)
	// JobList reads jobs without history or payload in params.Order (by default newest first:
	// created_at, then id, descending) after params.After.
	JobList(ctx context.Context, params *JobListParams) ([]*job.Job, error)

	// BreakerLoadAll reads every saved circuit breaker state.
	BreakerLoadAll(ctx context.Context) ([]BreakerRecord, error)

	// JobListDead reads dead jobs without history or payload in params.Order (by default
	// newest first: finished_at, then id, descending), after params.After when set.
	JobListDead(ctx context.Context, params *DeadJobListParams) ([]*job.Job, error)
	// JobGetMany reads jobs without history or payload, in the order of ids; ids that do
	// not exist are left out.
	JobGetMany(ctx context.Context, ids []int64) ([]*job.Job, error)
	// DeadErrorGroups groups the dead jobs f matches by last error type, largest group first.
	DeadErrorGroups(ctx context.Context, f *DeadJobFilter, limit int) ([]DeadErrorGroup, error)

	// QueueLoadAll reads every queue's settings.
	QueueLoadAll(ctx context.Context) ([]QueueRecord, error)
	// PausedReady counts the ready jobs of the paused queues, up to atMost: whether they hold a
	// backlog (PausedBacklogMin). Its cost follows neither the backlog nor the history.
	PausedReady(ctx context.Context, atMost int) (int, error)
	// QueueStats reads queues with their depth; name "" reads every queue.
	QueueStats(ctx context.Context, name string) ([]QueueStats, error)
	// JobCounts counts jobs per queue, type and state.
	JobCounts(ctx context.Context) ([]StateCount, error)
	// RecentCounts counts jobs that succeeded or died, and attempts that failed, at or after since.
	RecentCounts(ctx context.Context, since time.Time) (RecentCounts, error)

	// TokenGetByHash reads the API token whose secret hashes to hash, revoked or not, or
	// ErrNotFound.
	TokenGetByHash(ctx context.Context, hash []byte) (*TokenRecord, error)
	// TokenList reads every API token, revoked ones included, oldest first.
	TokenList(ctx context.Context) ([]TokenRecord, error)

	// AuditList reads the audit events p matches, newest first (by ID, descending), at most
	// p.Limit.
	AuditList(ctx context.Context, p *AuditListParams) ([]AuditEvent, error)

	DepsReader // deps.go
	// Both stores tell their broker of dependents made ready or changed by a commit: part of
	// the interface, so a wrapper that embeds a Store passes them on.
	DependentsNotifier
	DependentsChangedNotifier
	VersionReader
	ScheduleReader
	BatchReader
	RateLimitReader

	Close() error
}

// Tx is one write transaction. Methods that apply only while a lease is current report whether
// they changed anything: false means the lease was stale and nothing changed. Each of them
// also reports true, changing nothing, when the job already shows the write's own effect: the
// same lease token, the same attempt count and the state the write moves it to (JobStart,
// JobFinish, JobSucceedMany, JobRelease; JobExtendLeases and JobGetHeld are the same when
// repeated). Any other token, older or newer, is stale.
type Tx interface {
	DepsTx // deps.go
	ProgressTx
	ConcurrencyTx
	RateLimitTx
	// Isolated runs fn as a part of the transaction that can fail alone: when fn returns an
	// error that is not storage failing as a whole, everything fn wrote is undone and a
	// *IsolatedError is returned; the transaction may go on. Any other error fails it.
	Isolated(fn func() error) error
	// Publish announces e to every broker serving the database once the transaction commits
	// (see Cluster); nothing is sent if it rolls back. A store no other broker can serve
	// ignores it.
	Publish(e Event)
	// JobInsertMany adds jobs in order. Idempotency keys are scoped by type. A job whose key a
	// job of its type holds is not added: when the two match in every IdempotencyFields, its
	// result names the existing job and says Duplicate; otherwise JobInsertMany fails with an
	// *IdempotencyConflictError and the caller must roll back. A job whose unique key
	// (JobInsertParams.UniqueKey) a job holds is not added either: its result names that job
	// and says Duplicate and Unique. The idempotency key is looked at first.
	JobInsertMany(ps []*JobInsertParams) ([]JobInsertResult, error)
	// JobLease moves up to p.Limit ready jobs to LEASED for one worker, highest priority first,
	// then oldest run_at, each with a new fencing token.
	JobLease(p *JobLeaseParams) ([]*job.Job, error)
	// JobLeaseAtCommit is JobLease for leases that are the transaction's last word: nothing
	// else in the transaction depends on which jobs they take. All of ps have one scope
	// (SameLeaseScope); each has its own Limit, MaxBytes, WorkerID, Owner and LeaseUntil, and
	// the first takes the first jobs in dispatch order, the next the following ones. A store
	// may send them with COMMIT, saving the round trip of waiting for them; a failure of their
	// statement then fails the whole transaction, so they are never made inside Isolated. got
	// receives the jobs of each lease, in the order of ps, or the error of reading them (they
	// then stay leased until their lease runs out), at the latest as the transaction ends; the
	// transaction may still fail after it, so callers act on the jobs only once Write has
	// returned nil. If the connection is lost with the answer of a COMMIT that went through,
	// got is not called at all, and the jobs stay leased until their lease runs out: late,
	// never lost.
	JobLeaseAtCommit(ps []*JobLeaseParams, got func([][]*job.Job, error)) error
	// JobInsertOfferedAtCommit inserts jobs without idempotency keys, ready now, as
	// JobInsertMany does, and leases job i to offers[i] (when not nil) in the same write, with
	// a new fencing token, when that lease can go ahead of nothing and past no rule: no ready
	// job stored before this call has at least its priority (a store may count only those of
	// the queues the offer's worker takes, JobOffer.Queues; a paused queue's jobs do not count
	// while fewer than PausedBacklogMin of them come first, and past that many a store may
	// refuse the offer), its queue is neither paused nor capped, and no stored breaker is shut
	// for its type. Otherwise job i stays PENDING, as JobInsertMany stores it. It lets a broker
	// with a free worker slot hand a new job out with the commit that stores it, without a
	// lease of its own. got receives the leased jobs (nil
	// for one left PENDING), with the care JobLeaseAtCommit's got needs.
	JobInsertOfferedAtCommit(ps []*JobInsertParams, offers []*JobOffer, got func([]*job.Job, error)) ([]JobInsertResult, error)
	// JobLockRows locks the rows of the jobs ids for the writes of them the transaction makes
	// next, in the store's lock order (jobs by id ascending): a transaction that writes several
	// jobs that exist, in whatever order its writes come, then takes all their rows first and in
	// that order, so two that write the same jobs wait for one another instead of deadlocking.
	// ids need not be sorted or distinct; an id of no job locks nothing. It comes before the
	// transaction's other writes of jobs, and its answer may come with the next statement. A
	// store whose writers take turns (SQLite) does nothing.
	JobLockRows(ids []int64) error
	// JobStart moves a LEASED job to RUNNING: user code started and the attempt counts. A job
	// already RUNNING under the same lease and attempt is reported as started too: the same
	// start stored again. A lease that has run out by p.Now (its deadline is p.Now or earlier)
	// is not started, even before a sweep has ended it: once its deadline passed, the job is
	// free for another attempt, and the lease ends with no attempt spent.
	JobStart(p *JobStartParams) (bool, error)
	// JobStartMany is JobStart for many leases at once; started[i] says whether ps[i] was
	// current. A lease listed twice is started once.
	JobStartMany(ps []*JobStartParams) (started []bool, err error)
	// JobFinish ends a held job's attempt: it records the attempt and sets the job's next state.
	JobFinish(p *JobFinishParams) (bool, error)
	// JobSucceedMany is JobFinish for many successful attempts at once (every p.Attempt has
	// outcome SUCCEEDED); applied[i] says whether ps[i] was current.
	JobSucceedMany(ps []*JobFinishParams) (applied []bool, err error)
	// JobSucceedManyAtCommit is JobSucceedMany for successes whose answer is wanted only once
	// the transaction is over: a store may send them with COMMIT. got receives applied, or the
	// error of reading it, as JobLeaseAtCommit's got does, with the same care: the
	// transaction may still fail after it, and it is not called when the connection is lost
	// with the answer of a COMMIT that went through. Sent before COMMIT, with a statement of
	// the transaction that is waited for, got is called before that statement's call returns:
	// a caller that needs the answer within the transaction (a success counted in a breaker
	// the transaction then locks) reads it after its next call that returns something read
	// (BreakerLock), and a store must have called got by then.
	JobSucceedManyAtCommit(ps []*JobFinishParams, got func(applied []bool, err error)) error
	// JobRelease hands a LEASED job back to PENDING without spending an attempt.
	JobRelease(ref job.LeaseRef) (bool, error)
	// JobReleaseMany is JobRelease for many leases at once; released[i] says whether refs[i]
	// was current.
	JobReleaseMany(refs []job.LeaseRef) (released []bool, err error)
	// JobExtendLeases moves the lease deadline of every current lease in refs that has not run
	// out by now (its deadline is after now) to until, and returns those it extended. A lease
	// whose deadline is now or earlier stays run out, even before a sweep has ended it: once
	// its deadline passed, the job is free for another attempt.
	JobExtendLeases(refs []job.LeaseRef, now, until time.Time) ([]job.LeaseRef, error)
	// JobGetHeld reads a job if ref is its current lease (state LEASED or RUNNING).
	JobGetHeld(ref job.LeaseRef) (*job.Job, error)
	// JobCancel cancels a job that has not finished. It returns the job as it was before, or
	// ErrNotFound. A job already final is returned unchanged.
	JobCancel(id int64, now time.Time) (*job.Job, error)
	// JobChangeWaiting applies an operator's change to a job that waits (WaitingChange) if the
	// job still meets its condition (WaitingChange.Cond), checked under the job's lock. It
	// returns the job as it was before, without its payload, and whether it changed it; a job
	// that does not exist is ErrNotFound.
	JobChangeWaiting(c *WaitingChange) (before *job.Job, changed bool, err error)
	// JobPromoteScheduled moves SCHEDULED jobs whose run_at has come to PENDING.
	JobPromoteScheduled(now time.Time) (int, error)
	// JobNextScheduledAt is the earliest run_at of a SCHEDULED job.
	JobNextScheduledAt() (time.Time, bool, error)
	// JobHeldExpired lists held jobs whose lease ran out or, when RUNNING, whose attempt
	// deadline passed, by now.
	JobHeldExpired(now time.Time, limit int) ([]*job.Job, error)
	// JobReleaseAllLeased hands every LEASED job back to PENDING (at broker start, when no
	// worker can hold a lease that never started).
	JobReleaseAllLeased() (int, error)
	// JobListRunning reads every RUNNING job, without payloads (at broker start: each still
	// holds its place under its queue's cap until its worker comes back or its lease runs out).
	JobListRunning() ([]*job.Job, error)
	// BreakerSave stores one circuit breaker's state.
	BreakerSave(r BreakerRecord) error
	// BreakerSaveIf is BreakerSave of a breaker not locked: it stores r only if the type's
	// stored data is still stored, byte for byte, as when this writer last read or wrote it,
	// and every lease of succeeded has its job SUCCEEDED under it (r counts their successes,
	// stored earlier in the transaction, before their answer was known); otherwise it fails
	// the transaction, with an error the store's classifier may call transient (run again,
	// the writer locks the breaker instead). A store may send it
	// with the next statement waited for or with COMMIT; it takes the breaker's row in the
	// lock order as BreakerLock does.
	BreakerSaveIf(r BreakerRecord, stored []byte, succeeded []job.LeaseRef) error
	// BreakerLock reads a type's circuit breaker state and holds it locked until the
	// transaction ends, so that a breaker several brokers share is changed by one transaction
	// at a time (read, change, BreakerSave). When none is stored, initial is stored and returned.
	BreakerLock(typ string, initial []byte) ([]byte, error)
	// BreakerGet reads the stored breaker states of types, without locking them, in type
	// order; types with none are left out.
	BreakerGet(types []string) ([]BreakerRecord, error)
	// BreakerShutAtCommit is BreakerGet of the types' shut breakers (BreakerRecord.Shut) for a
	// caller that wants them only once the transaction is over: a store may send it with
	// COMMIT. got receives them, or the error of reading them, at the latest as the transaction
	// ends; callers act on them only once Write has returned nil.
	BreakerShutAtCommit(types []string, got func([]BreakerRecord, error)) error

	// JobDeadIDs lists the ids of the dead jobs f matches, newest first, at most limit.
	JobDeadIDs(f *DeadJobFilter, limit int) ([]int64, error)
	// JobStates reads the state of each job of ids that exists.
	JobStates(ids []int64) (map[int64]job.State, error)
	// JobGetMany is Store.JobGetMany inside the transaction.
	JobGetMany(ids []int64) ([]*job.Job, error)
	// JobRequeue sends the dead jobs among p.IDs back to run and returns how many it changed.
	// A requeued job whose unique key another job holds, or another job of the requeue with a
	// smaller id keeps, loses its key: it runs as a job without one rather than not at all.
	// A requeued job leaves its batch's dead count (it is counted again when it is final), and
	// the dependents its death cancelled (dep_nodes.cancelled_by), and theirs in turn, are
	// WAITING again, their cancel reason cleared, their edges settled anew by their parents'
	// states, and out of the finished totals and their batches' counts; a dependent that
	// another DEAD or CANCELLED parent holds stays cancelled.
	JobRequeue(p *JobRequeueParams) (int, error)
	// JobDeleteDead deletes the dead jobs among ids, with their attempts.
	JobDeleteDead(ids []int64) (int, error)
	// JobDeleteFinished deletes up to p.Limit jobs in one of p.States that finished before
	// p.FinishedBefore, with their attempts, oldest first.
	JobDeleteFinished(p *JobDeleteFinishedParams) (int, error)
	// QueueSetPaused pauses or resumes a queue. Pausing creates the queue if it is new, so a
	// queue can be held before its first job; resuming one that does not exist is ErrNotFound,
	// so a misspelt name does not leave a phantom queue behind.
	QueueSetPaused(name string, paused bool) error
	// QueueSetLimit sets a queue's concurrency limit (0: none); a queue that does not exist is
	// ErrNotFound.
	QueueSetLimit(name string, limit int) error

	// TokenInsert adds an API token.
	TokenInsert(r *TokenRecord) error
	// TokenRevoke marks a token revoked at now and returns it as it is after; ErrNotFound
	// when no token has the id. Revoking a revoked token changes nothing.
	TokenRevoke(id string, now time.Time) (*TokenRecord, error)
	// TokenCount counts the tokens, revoked ones included.
	TokenCount() (int, error)

	// AuditInsert stores an audit event and sets its ID. JobIDs past MaxAuditJobIDs are not
	// kept.
	AuditInsert(e *AuditEvent) error
	// AuditAddCount adds n to the Count of the event with id (an action done in several
	// transactions counts each one's share in it); ErrNotFound when there is none.
	AuditAddCount(id int64, n int64) error
	// AuditDeleteBefore deletes up to limit audit events stored before t, oldest first, and
	// returns how many it deleted.
	AuditDeleteBefore(t time.Time, limit int) (int, error)

	ScheduleTx
	BatchWriter
}

// JobInsertParams is a validated job to add.
type JobInsertParams struct {
	Type           string
	Queue          string
	Payload        []byte
	Priority       int
	RunAt          time.Time
	MaxAttempts    int
	IdempotencyKey string
	AttemptTimeout time.Duration
	// Metadata is stored with the job and handed to its worker (nil: none).
	Metadata map[string]string
	// UniqueKey, when set, makes the job unique (job/unique): it is not added while a job
	// holds the key, one whose state is in that job's UniqueStates (a unique.Mask), and
	// the result names that job as a Duplicate.
	UniqueKey    string
	UniqueStates int
	// Concurrency is the job's concurrency key (keyconc.go); zero for none. A job with a key
	// is never offered (JobInsertOfferedAtCommit).
	Concurrency Concurrency
	// RateKey is the key the job counts under in the keyed rate limits that match it ('':
	// none, or the empty key).
	RateKey string
	Now     time.Time
}

// Keyed reports whether p carries a key that another job may hold (an idempotency or a unique
// key), so that its insert must look for that job: it cannot join a statement of many.
func (p *JobInsertParams) Keyed() bool { return p.IdempotencyKey != "" || p.UniqueKey != "" }

// JobInsertResult says what became of an insert.
type JobInsertResult struct {
	ID        int64
	Duplicate bool
	// Unique says the duplicate's job holds the insert's unique key (else its idempotency key).
	Unique bool
	State  job.State
	RunAt  time.Time
}

// JobOffer is the lease a new job is offered with (Tx.JobInsertOfferedAtCommit).
type JobOffer struct {
	WorkerID   string
	Owner      string // as JobLeaseParams.Owner
	LeaseUntil time.Time
	// Random supplies the lease token's secret (job.NewLeaseToken). Nil: crypto/rand.Reader.
	Random io.Reader
	// Queues are the queues the worker takes jobs of; none: every queue. A store may count
	// only the ready jobs of these as ones the offered job would go ahead of (both stores do,
	// reading them as a lease of the worker would, store.PlanReads); it must count those.
	Queues []string
	// Types are the job types the worker takes; none: unknown. A store may count only the
	// ready jobs of these, as for Queues (both stores do).
	Types []string
}

// CheckOffers refuses offers that do not pair with ps (Tx.JobInsertOfferedAtCommit): one per
// job, for jobs with no idempotency or unique key that are ready now.
func CheckOffers(ps []*JobInsertParams, offers []*JobOffer) error {
	if len(offers) != len(ps) {
		return fmt.Errorf("%d offers for %d jobs", len(offers), len(ps))
	}
	for i, p := range ps {
		if p.Keyed() {
			return fmt.Errorf("job %d of an offered insert has an idempotency or a unique key", i)
		}
		if offers[i] != nil && p.Concurrency.Key != "" {
			return fmt.Errorf("job %d is offered but has a concurrency key", i)
		}
		if offers[i] != nil && p.RunAt.After(p.Now) {
			return fmt.Errorf("job %d is offered but scheduled for later", i)
		}
	}
	return nil
}

// JobLeaseParams selects ready jobs for one worker.
type JobLeaseParams struct {
	Types         []string // at least one
	Queues        []string // empty: any queue
	ExcludeQueues []string // never these (capped without room, or paused)
	// ExcludePaused leaves out every queue the queues table marks paused, however many: the
	// store joins the table rather than listing names.
	ExcludePaused bool
	ExcludeTypes  []string // never these (breaker open)
	// ExcludeShut leaves out every type whose stored breaker is shut (BreakerRecord.Shut),
	// read by the lease's own statement: brokers that share breakers lease nothing of a type
	// another broker has just opened, though their caches do not know it yet.
	ExcludeShut bool
	// PausedBacklog says the caller knows of a paused queue that holds, or may hold, a backlog:
	// at least PausedBacklogMin ready jobs when last counted (PausedReady), or paused since. A
	// lease of every queue that leaves the paused ones out (ExcludePaused) then names the queues
	// with ready jobs that are not, when they are few, and reads each (the PostgreSQL store; the
	// SQLite store names them whenever it leaves a queue out, at no round trip): read by type in
	// every queue, it passes over the paused queues' ready jobs of its types. Without it a lease
	// reads every queue, and still leaves out a queue paused meanwhile: beside 99 paused jobs a
	// drain on PostgreSQL was as fast either way.
	PausedBacklog bool
	// SkipCapped, with EnforceQueues, leaves out the jobs of every queue the queues table
	// marks capped (as well as the paused ones), rather than counting the capped queues' room
	// under their locks: for a caller that knows of no capped queue, a lease of one statement.
	// A queue capped meanwhile by another broker is thus never overfilled, only left for a
	// lease without SkipCapped.
	SkipCapped bool
	// Caps holds how many more jobs each capped queue may have leased; queues not in it have
	// no cap. The store leases a capped queue's job only while its number is above zero, and
	// takes one from it for each: callers share one map between the leases of a round.
	Caps map[string]int
	// EnforceQueues makes the database the authority on queue pauses and caps, as brokers that
	// share one database need (store.Cluster): a queue the queues table marks paused is never
	// leased from, whatever Queues names, and a capped queue's job is leased only while the
	// queue's LEASED and RUNNING jobs in the database, this transaction's included, stay under
	// its limit. Caps and ExcludePaused are then unused. A store several brokers may lease from
	// at once counts under a lock on the capped queues' rows, so two leases cannot both fill
	// the same room; a write that pauses or caps a queue takes the same lock.
	EnforceQueues bool
	// Keyed makes the lease honour concurrency keys (keyconc.go): a keyed job is leased only
	// while its key has room, counted in the database under the keys' lock, and the keys' jobs
	// are taken round-robin. Without it the lease leaves every keyed job out.
	Keyed bool
	// Rates, when set, has the lease apply the stored rate limits (see RateLease): nil for a
	// broker that knows of none, whose leases then cost nothing more.
	Rates *RateLease
	// ExcludeRated leaves out the jobs of each bucket a lease found empty (a store sets it on
	// its own copy as it leases: see RateExclusion).
	ExcludeRated []ratelimit.Hold
	Limit        int // written into the statement: keep the set of values small
	// MaxBytes, when positive, stops the lease once the leased jobs' payloads reach it (at
	// least one job is leased): what a worker is handed in one go stays bounded in memory.
	MaxBytes int
	WorkerID string
	// Owner is who the worker stream authenticated as ('' when auth is off); with WorkerID it
	// is the identity that may adopt the lease after a reconnect.
	Owner      string
	Now        time.Time
	LeaseUntil time.Time
	// Random supplies each lease token's secret (job.NewLeaseToken). Nil: crypto/rand.Reader,
	// so tokens cannot be guessed.
	Random io.Reader
}

// DropQueue leaves the queue q out of p's scope: a lease that found q full reads again
// without it. It reports whether any queue is left (false when p named its queues and q was
// the last of them). p's slices are copied, not changed in place: they may be the caller's.
func (p *JobLeaseParams) DropQueue(q string) bool {
	p.ExcludeQueues = append(slices.Clone(p.ExcludeQueues), q)
	if len(p.Queues) == 0 {
		return true
	}
	p.Queues = slices.DeleteFunc(slices.Clone(p.Queues), func(x string) bool { return x == q })
	return len(p.Queues) > 0
}

// LeasedTypes are the types a lease of p may take: its types less those it leaves out
// (ExcludeTypes), in their order. A store that reads each type on its own leaves the excluded
// ones out once, here, rather than in every read.
func (p *JobLeaseParams) LeasedTypes() []string {
	if len(p.ExcludeTypes) == 0 {
		return p.Types
	}
	kept := make([]string, 0, len(p.Types))
	for _, t := range p.Types {
		if !slices.Contains(p.ExcludeTypes, t) {
			kept = append(kept, t)
		}
	}
	return kept
}

// SameLeaseScope reports whether two leases select from the same jobs under the same rules:
// the same types, queues and exclusions, and the same rules enforced. Their limits, payload
// bounds and holders may differ.
func SameLeaseScope(a, b *JobLeaseParams) bool {
	return slices.Equal(a.Types, b.Types) && slices.Equal(a.Queues, b.Queues) &&
		slices.Equal(a.ExcludeQueues, b.ExcludeQueues) && slices.Equal(a.ExcludeTypes, b.ExcludeTypes) &&
		a.ExcludePaused == b.ExcludePaused && a.ExcludeShut == b.ExcludeShut && a.PausedBacklog == b.PausedBacklog &&
		a.SkipCapped == b.SkipCapped &&
		a.EnforceQueues == b.EnforceQueues && a.Keyed == b.Keyed && maps.Equal(a.Caps, b.Caps)
}

// CheckLeaseScope refuses leases asked for together (Tx.JobLeaseAtCommit) whose scopes differ.
func CheckLeaseScope(ps []*JobLeaseParams) error {
	for _, p := range ps[min(1, len(ps)):] {
		if !SameLeaseScope(ps[0], p) {
			return errors.New("leases at commit of different scopes (types, queues or rules) in one call")
		}
	}
	return nil
}

// WithinBytes is how many of jobs, in order, a lease bounded by maxBytes keeps
// (JobLeaseParams.MaxBytes): every job whose predecessors' payloads stay under it, so at least
// one. Zero or less: all of them.
func WithinBytes(jobs []*job.Job, maxBytes int) int {
	if maxBytes <= 0 {
		return len(jobs)
	}
	bytes := 0
	for i, j := range jobs {
		if bytes >= maxBytes {
			return i
		}
		bytes += len(j.Payload)
	}
	return len(jobs)
}

// JobStartParams marks user code started.
type JobStartParams struct {
	Ref job.LeaseRef
	// Attempt is the number the attempt has once started (the job's attempts after the start):
	// a start found already stored counts as this one only if it has the same number.
	Attempt int
	// Now is when the broker read the start: the lease must not have run out by then.
	Now             time.Time
	LeaseUntil      time.Time
	AttemptDeadline time.Time
}

// JobFinishParams ends an attempt.
type JobFinishParams struct {
	Ref job.LeaseRef
	// Queue and Type are the job's: a store that keeps totals of finished jobs by queue and
	// type counts the finished job under them without reading it back.
	Queue, Type string
	// State is the job's next state: SUCCEEDED, SCHEDULED or PENDING (retry), DEAD or CANCELLED.
	State      job.State
	RunAt      time.Time // for a retry
	DeadReason job.DeadReason
	Attempt    job.Attempt // the attempt record; Number becomes the job's attempt count
	// Unstarted: the job's user code never ran under this lease (its assignment could not be
	// delivered), so no attempt record is written; Attempt.Number is the attempts before it,
	// which the job's count keeps, and its error becomes the job's last one. Attempts are
	// counted only from a start.
	Unstarted bool
	Now       time.Time
	// Result is what a successful attempt returned (nil: none); other states store none.
	Result []byte
	// Batch is the job's batch (job.Job.BatchID), 0 when none: a final write of a batch's job
	// is counted in the batch (see BatchWriter).
	Batch int64
}

// JobListParams filters a job listing. Listed jobs carry no history or payload.
type JobListParams struct {
	State job.State // 0: any
	Queue string
	Type  string
	// Order is one of JobSorts; the default is creation, newest first. Ids do not follow
	// creation across brokers sharing a database (each draws its ids in blocks), so the
	// default is by creation time, ties broken by id.
	Order ListOrder
	After *ListCursor // nil: from the first
	Limit int
}

// DeadJobFilter selects dead jobs. Zero fields match any.
type DeadJobFilter struct {
	Queue      string
	Type       string
	Reason     job.DeadReason
	ErrorType  string
	DeadAfter  time.Time // finished_at >= DeadAfter
	DeadBefore time.Time // finished_at < DeadBefore
}

// Conds calls add with each condition f sets, as a column with its comparison ("queue =") and
// the value to compare with, in a fixed order, so both stores filter dead jobs by the same
// rules and each only renders them in its SQL. A nil or zero filter sets none.
func (f *DeadJobFilter) Conds(add func(cond string, v any)) {
	if f == nil {
		return
	}
	if f.Queue != "" {
		add("queue =", f.Queue)
	}
	if f.Type != "" {
		add("type =", f.Type)
	}
	if f.Reason != job.DeadNone {
		add("dead_reason =", int64(f.Reason))
	}
	if f.ErrorType != "" {
		add("last_error_type =", f.ErrorType)
	}
	if !f.DeadAfter.IsZero() {
		add("finished_at >=", f.DeadAfter.UnixNano())
	}
	if !f.DeadBefore.IsZero() {
		add("finished_at <", f.DeadBefore.UnixNano())
	}
}

// InIDOrder returns the jobs of byID in the order of ids, each once, leaving out the ids byID
// lacks: what JobGetMany returns from a store's read of the rows, which comes in no order. It
// empties byID.
func InIDOrder(ids []int64, byID map[int64]*job.Job) []*job.Job {
	out := make([]*job.Job, 0, len(byID))
	for _, id := range ids {
		if j := byID[id]; j != nil {
			out = append(out, j)
			delete(byID, id) // an id given twice is listed once
		}
	}
	return out
}

// DeadJobListParams pages through dead jobs.
type DeadJobListParams struct {
	Filter DeadJobFilter
	Order  ListOrder   // one of DeadSorts; the default is when they died, newest first
	After  *ListCursor // nil: from the first
	Limit  int
}

// DeadErrorGroup is the dead jobs that share a last error type.
type DeadErrorGroup struct {
	ErrorType     string
	Count         int64
	LastSeen      time.Time
	SampleMessage string
	// Fingerprint, when set, narrows the group to the jobs of ErrorType whose message has this
	// fingerprint (a generic error type is split this way).
	Fingerprint string
}

// JobRequeueParams sends dead jobs back to run.
type JobRequeueParams struct {
	IDs      []int64
	RunAt    time.Time // SCHEDULED when after Now, else PENDING
	Priority *int      // nil keeps each job's own
	Payload  []byte    // nil keeps each job's own
	Now      time.Time
}

// JobDeleteFinishedParams selects finished jobs to delete.
type JobDeleteFinishedParams struct {
	States         []job.State // final states only
	FinishedBefore time.Time
	Limit          int
}

// QueueRecord is a queue's settings.
type QueueRecord struct {
	Name             string
	Paused           bool
	ConcurrencyLimit int
}

// QueueStats is a queue's settings and shape.
type QueueStats struct {
	QueueRecord
	Depth map[job.State]int64
	// OldestReadyAt is the run_at of the oldest PENDING job; zero when none is ready.
	OldestReadyAt time.Time
}

// StateCount is how many jobs of one queue and type are in one state.
type StateCount struct {
	Queue string
	Type  string
	State job.State
	Count int64
}

// RecentCounts counts what finished in a window: jobs that succeeded, attempts that failed and
// jobs that died.
type RecentCounts struct {
	Succeeded int64 // jobs that succeeded (one successful attempt each)
	Failed    int64 // attempts that failed, timed out or lost their lease
	Dead      int64 // jobs that went to the dead-letter queue
}

// BreakerRecord is a circuit breaker's durable state, stored as an opaque document.
type BreakerRecord struct {
	Type string
	Data []byte
	// Shut says the breaker holds its type's jobs back from every lease but its probes (it is
	// not CLOSED): JobLeaseParams.ExcludeShut reads it in the database.
	Shut bool
}

// IsolatedError is the failure of one part of a transaction (Tx.Isolated): what the part wrote
// is undone and the rest of the transaction can still commit.
type IsolatedError struct{ Err error }

func (e *IsolatedError) Error() string { return e.Err.Error() }
func (e *IsolatedError) Unwrap() error { return e.Err }
