package broker

import (
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// JobSpec is a job a producer asks the broker to store. A zero field takes a default, and
// withDefaults is the one place those defaults are decided.
type JobSpec struct {
	Type    string
	Queue   string // "": job.DefaultQueue
	Payload []byte
	// Priority orders ready jobs, higher first; 0 is the default.
	Priority int
	// RunAt is when the job may first run. Zero means Delay after it is stored; a time in
	// the past means now.
	RunAt time.Time
	// Delay, when RunAt is zero, is how long after it is stored the job may first run.
	Delay time.Duration
	// MaxAttempts counts the first attempt; 0 means the retry policy of the job's type.
	MaxAttempts int
	// AttemptTimeout bounds one attempt; 0 means Config.AttemptTimeout.
	AttemptTimeout time.Duration
	IdempotencyKey string
	// Metadata is stored with the job and handed to its worker (nil: none).
	Metadata map[string]string
	// Deps, when it names parents, makes the job wait for them (deps.go).
	Deps *DepsSpec
}

// Enqueued is what became of one JobSpec.
type Enqueued struct {
	ID int64
	// Duplicate says an earlier job holds the spec's idempotency key; ID is that job's.
	Duplicate bool
	State     job.State
	RunAt     time.Time
}

// withDefaults fills the spec's zero fields from cfg and resolves when the job may run,
// as of now. Delay is zero in what it returns: it is folded into RunAt.
func (s JobSpec) withDefaults(cfg Config, now time.Time) JobSpec {
	s.Queue = job.QueueOrDefault(s.Queue)
	if s.RunAt.IsZero() {
		s.RunAt = now.Add(s.Delay)
	}
	s.RunAt, s.Delay = notBefore(s.RunAt, now), 0
	if s.MaxAttempts == 0 {
		s.MaxAttempts = cfg.policy(s.Type).MaxAttempts
	}
	if s.AttemptTimeout == 0 {
		s.AttemptTimeout = cfg.AttemptTimeout
	}
	return s
}

// notBefore is when something asked to happen at "at" happens: a time in the past (the zero
// time included) means now. Kept as given, a past run-at would put a job ahead of every other
// job of its priority that is waiting.
func notBefore(at, now time.Time) time.Time {
	if at.Before(now) {
		return now
	}
	return at
}

// insertParams is the store's insert of a spec that withDefaults filled.
func (s *JobSpec) insertParams(now time.Time) *store.JobInsertParams {
	return &store.JobInsertParams{Type: s.Type, Queue: s.Queue, Payload: s.Payload, Priority: s.Priority,
		RunAt: s.RunAt, MaxAttempts: s.MaxAttempts, IdempotencyKey: s.IdempotencyKey,
		AttemptTimeout: s.AttemptTimeout, Metadata: s.Metadata, Now: now}
}
