// Package job holds the broker's shared domain types: a job, its states, attempts and the
// reasons a job dies. It imports nothing of the project, so every other package can use it.
package job

import (
	"fmt"
	"time"
)

// State is where a job is in its life. The numbering is stored in the database; never renumber.
type State int

const (
	// StateScheduled: run_at is in the future (a delayed job, or a retry waiting out its backoff).
	StateScheduled State = 1
	// StatePending: ready for dispatch.
	StatePending State = 2
	// StateLeased: sent to a worker, user code not started; no attempt spent yet.
	StateLeased State = 3
	// StateRunning: user code started; the attempt counts.
	StateRunning State = 4
	// StateSucceeded is final.
	StateSucceeded State = 5
	// StateDead is final: the job is in the dead-letter queue with a DeadReason.
	StateDead State = 6
	// StateCancelled is final.
	StateCancelled State = 7
	// StateWaiting: the job waits for its parents (JobSpec.depends_on); it becomes PENDING in
	// the transaction that makes its last parent SUCCEEDED, or CANCELLED in the one that makes
	// a parent DEAD or CANCELLED (unless it runs whatever its parents' outcome).
	StateWaiting State = 8
)

var stateNames = map[State]string{
	StateScheduled: "SCHEDULED",
	StatePending:   "PENDING",
	StateLeased:    "LEASED",
	StateRunning:   "RUNNING",
	StateSucceeded: "SUCCEEDED",
	StateDead:      "DEAD",
	StateCancelled: "CANCELLED",
	StateWaiting:   "WAITING",
}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Final reports whether no transition leaves s.
func (s State) Final() bool {
	return s == StateSucceeded || s == StateDead || s == StateCancelled
}

// Held reports whether a worker holds a lease on a job in state s.
func (s State) Held() bool { return s == StateLeased || s == StateRunning }

// ParseState reads a state name such as "PENDING" (case-sensitive).
func ParseState(name string) (State, bool) {
	for s, n := range stateNames {
		if n == name {
			return s, true
		}
	}
	return 0, false
}

// FailureKind is the worker's verdict on a failure.
type FailureKind int

const (
	// KindUnspecified is treated as transient.
	KindUnspecified FailureKind = 0
	// KindFatal: a code or payload bug; retrying cannot help.
	KindFatal FailureKind = 1
	// KindTransient: a passing condition; retry with backoff.
	KindTransient FailureKind = 2
)

func (k FailureKind) String() string {
	switch k {
	case KindFatal:
		return "FATAL"
	case KindTransient:
		return "TRANSIENT"
	default:
		return "UNSPECIFIED"
	}
}

// DeadReason says why a job is in the dead-letter queue. Stored in the database; never renumber.
type DeadReason int

const (
	DeadNone                 DeadReason = 0
	DeadFatal                DeadReason = 1
	DeadMaxAttemptsExhausted DeadReason = 2
	DeadRetryLifetimeExpired DeadReason = 3
	DeadLeaseExpired         DeadReason = 4
	DeadTimeout              DeadReason = 5
)

var deadReasonNames = map[DeadReason]string{
	DeadFatal:                "FATAL",
	DeadMaxAttemptsExhausted: "MAX_ATTEMPTS_EXHAUSTED",
	DeadRetryLifetimeExpired: "RETRY_LIFETIME_EXPIRED",
	DeadLeaseExpired:         "LEASE_EXPIRED",
	DeadTimeout:              "TIMEOUT",
}

func (r DeadReason) String() string {
	if n, ok := deadReasonNames[r]; ok {
		return n
	}
	return "NONE"
}

// ParseDeadReason reads a reason name such as "FATAL".
func ParseDeadReason(name string) (DeadReason, bool) {
	for r, n := range deadReasonNames {
		if n == name {
			return r, true
		}
	}
	return 0, false
}

// Outcome is how one attempt ended. Stored in the database; never renumber.
type Outcome int

const (
	OutcomeRunning      Outcome = 1
	OutcomeSucceeded    Outcome = 2
	OutcomeFailed       Outcome = 3
	OutcomeLeaseExpired Outcome = 4
	OutcomeTimeout      Outcome = 5
	OutcomeCancelled    Outcome = 6
)

func (o Outcome) String() string {
	switch o {
	case OutcomeRunning:
		return "RUNNING"
	case OutcomeSucceeded:
		return "SUCCEEDED"
	case OutcomeFailed:
		return "FAILED"
	case OutcomeLeaseExpired:
		return "LEASE_EXPIRED"
	case OutcomeTimeout:
		return "TIMEOUT"
	case OutcomeCancelled:
		return "CANCELLED"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// DefaultQueue is the queue of a job enqueued without one.
const DefaultQueue = "default"

// QueueOrDefault is the queue a job enqueued into queue lands in. The broker fills every
// other default itself; this one is here because a producer's scope is checked, and its
// spans are named, by the queue before the job reaches the broker.
func QueueOrDefault(queue string) string {
	if queue == "" {
		return DefaultQueue
	}
	return queue
}

// Job is a unit of work and what the broker knows about it.
type Job struct {
	ID             int64
	Type           string
	Queue          string
	Payload        []byte
	Priority       int
	State          State
	Attempts       int // attempts that reached user code
	MaxAttempts    int
	RunAt          time.Time
	CreatedAt      time.Time
	FinishedAt     time.Time // zero until final
	IdempotencyKey string
	AttemptTimeout time.Duration
	DeadReason     DeadReason
	// Metadata is string keys and values the producer attached (W3C trace context under
	// "traceparent" and "tracestate", or its own keys); nil when none. Listings leave it out.
	Metadata map[string]string

	LastErrorType    string
	LastErrorMessage string

	// Lease, while State is Leased or Running.
	LeaseToken     LeaseToken
	LeaseExpiresAt time.Time
	WorkerID       string
	// LeaseOwner is who the leasing worker stream authenticated as ('' when auth is off).
	LeaseOwner string
	StartedAt  time.Time // when the current attempt's user code started

	// AttemptBase is how many attempts earlier runs spent: a job requeued from the dead-letter
	// queue starts a new run with Attempts at 0, and its attempt records are numbered
	// AttemptBase+1 onwards so the history of every run is kept.
	AttemptBase int
	// RequeuedAt is when the job was last requeued from the dead-letter queue; zero if never.
	RequeuedAt time.Time

	// Parents is how many jobs this one depends on (JobSpec.depends_on); 0 for most jobs.
	Parents int

	// History is every finished attempt, oldest first; filled only by single-job reads.
	History []Attempt

	// Result is what the successful attempt returned (nil when none); Progress is the newest
	// progress an attempt reported (nil when none). Filled only by single-job reads.
	Result   []byte
	Progress *Progress
}

// LifetimeStart is when the job's retry lifetime began: its creation, or its last requeue
// from the dead-letter queue, which gives it a fresh lifetime.
func (j *Job) LifetimeStart() time.Time {
	if j.RequeuedAt.After(j.CreatedAt) {
		return j.RequeuedAt
	}
	return j.CreatedAt
}

// AddSucceededAttempt appends a succeeded job's last attempt to its History. Stores keep the
// successful attempt in the job row rather than as an attempt record (one row written per
// success, not two), so a store reading a job's history rebuilds it from the row with this.
// It does nothing for a job in any other state.
func (j *Job) AddSucceededAttempt() {
	if j.State != StateSucceeded {
		return
	}
	j.History = append(j.History, Attempt{Number: j.AttemptBase + j.Attempts, WorkerID: j.WorkerID,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, Outcome: OutcomeSucceeded})
}

// Attempt is one run of user code.
type Attempt struct {
	Number      int
	WorkerID    string
	StartedAt   time.Time
	FinishedAt  time.Time
	Outcome     Outcome
	FailureKind FailureKind
	ErrorType   string
	Message     string
	Details     string
}

// Failure is a worker's report of a failed attempt.
type Failure struct {
	Kind       FailureKind
	ErrorType  string
	Message    string
	Details    string
	RetryAfter time.Duration // 0: use the computed backoff
	// TimedOut: the worker stopped user code at the attempt timeout. The attempt ends as one the
	// broker timed out itself (outcome TIMEOUT); Kind and RetryAfter are not used.
	TimedOut bool
}

// LeaseRef names one lease: a job and the fencing token it was leased with. A message that
// carries any other token than the job's current one is stale and changes nothing.
type LeaseRef struct {
	JobID int64
	Token LeaseToken
}
