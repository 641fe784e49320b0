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
	"time"

	"github.com/jobwire/jobwire/job"
)

// ErrNotFound is returned when a job (or other record) does not exist.
var ErrNotFound = errors.New("not found")

// Store is durable storage for jobs.
type Store interface {
	// Write runs fn in one write transaction and commits it. op names the operation for
	// logs and counters. fn may be run more than once when storage is briefly busy, so it
	// must only write through tx and keep no effects of a failed run.
	Write(ctx context.Context, op string, fn func(tx Tx) error) error

	// JobGet reads one job with its attempt history.
	JobGet(ctx context.Context, id int64) (*job.Job, error)
	// JobList reads jobs without history, in id order after params.AfterID.
	JobList(ctx context.Context, params *JobListParams) ([]*job.Job, error)

	// BreakerLoadAll reads every saved circuit breaker state.
	BreakerLoadAll(ctx context.Context) ([]BreakerRecord, error)

	Close() error
}

// Tx is one write transaction. Methods that apply only while a lease is current report whether
// they changed anything: false means the lease was stale and nothing changed.
type Tx interface {
	// JobInsert adds a job, or returns the existing one with the same idempotency key.
	JobInsert(p *JobInsertParams) (JobInsertResult, error)
	// JobLease moves up to p.Limit ready jobs to LEASED for one worker, highest priority first,
	// then oldest run_at, each with a new fencing token.
	JobLease(p *JobLeaseParams) ([]*job.Job, error)
	// JobStart moves a LEASED job to RUNNING: user code started and the attempt counts.
	JobStart(p *JobStartParams) (bool, error)
	// JobFinish ends a held job's attempt: it records the attempt and sets the job's next state.
	JobFinish(p *JobFinishParams) (bool, error)
	// JobRelease hands a LEASED job back to PENDING without spending an attempt.
	JobRelease(ref job.LeaseRef) (bool, error)
	// JobExtendLeases moves the lease deadline of every current lease in refs to until and
	// returns those it extended.
	JobExtendLeases(refs []job.LeaseRef, until time.Time) ([]job.LeaseRef, error)
	// JobGetHeld reads a job if ref is its current lease (state LEASED or RUNNING).
	JobGetHeld(ref job.LeaseRef) (*job.Job, error)
	// JobCancel cancels a job that has not finished. It returns the job as it was before, or
	// ErrNotFound. A job already final is returned unchanged.
	JobCancel(id int64, now time.Time) (*job.Job, error)
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
	// BreakerSave stores one circuit breaker's state.
	BreakerSave(r BreakerRecord) error
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
	Now            time.Time
}

// JobInsertResult says what became of an insert.
type JobInsertResult struct {
	ID        int64
	Duplicate bool
	State     job.State
	RunAt     time.Time
}

// JobLeaseParams selects ready jobs for one worker.
type JobLeaseParams struct {
	Types         []string // at least one
	Queues        []string // empty: any queue
	ExcludeQueues []string // never these (paused, or leased separately under a cap)
	ExcludeTypes  []string // never these (breaker open, or leased separately)
	Limit         int
	WorkerID      string
	Now           time.Time
	LeaseUntil    time.Time
}

// JobStartParams marks user code started.
type JobStartParams struct {
	Ref             job.LeaseRef
	Now             time.Time
	LeaseUntil      time.Time
	AttemptDeadline time.Time
}

// JobFinishParams ends an attempt.
type JobFinishParams struct {
	Ref job.LeaseRef
	// State is the job's next state: SUCCEEDED, SCHEDULED or PENDING (retry), DEAD or CANCELLED.
	State      job.State
	RunAt      time.Time // for a retry
	DeadReason job.DeadReason
	Attempt    job.Attempt // the attempt record; Number becomes the job's attempt count
	Now        time.Time
}

// JobListParams filters a job listing.
type JobListParams struct {
	State   job.State // 0: any
	Queue   string
	Type    string
	AfterID int64
	Limit   int
}

// BreakerRecord is a circuit breaker's durable state, stored as an opaque document.
type BreakerRecord struct {
	Type string
	Data []byte
}
