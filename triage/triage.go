// Package triage decides what becomes of a job after an attempt ends: done, retry later, or
// dead-letter queue. It holds no state and does no I/O; the broker stores what it decides.
package triage

import (
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/retry"
)

// Verdict is the kind of decision.
type Verdict int

const (
	// Succeeded: the job is done.
	Succeeded Verdict = iota + 1
	// Retry: the job runs again at Decision.RetryAt.
	Retry
	// Dead: the job goes to the dead-letter queue with Decision.Reason.
	Dead
)

func (v Verdict) String() string {
	switch v {
	case Succeeded:
		return "SUCCEEDED"
	case Retry:
		return "RETRY"
	case Dead:
		return "DEAD"
	}
	return "UNKNOWN"
}

// Decision is what the broker must store.
type Decision struct {
	Verdict Verdict
	RetryAt time.Time       // when Verdict is Retry
	Reason  job.DeadReason  // when Verdict is Dead
	Kind    job.FailureKind // the failure kind after the always-fatal list was applied
}

// Cause says how a failed attempt ended.
type Cause int

const (
	// Reported: the worker sent a failure.
	Reported Cause = iota
	// LeaseExpired: user code was running and the lease ran out (worker gone or stuck).
	LeaseExpired
	// Timeout: the attempt outlived its attempt timeout.
	Timeout
)

// Attempt describes a finished attempt.
type Attempt struct {
	Number      int // 1-based number of the attempt that ended
	MaxAttempts int // the job's own limit; 0 means the policy's
	CreatedAt   time.Time
	Cause       Cause
	Failure     job.Failure
}

// Triager makes decisions with one policy per job type.
type Triager struct {
	// Policy returns the retry policy of a job type.
	Policy func(jobType string) retry.Policy
	// AlwaysFatal names error types that are fatal whatever kind the worker reported.
	AlwaysFatal map[string]bool
	// Uniform draws from U[0,1) for jitter. It must be safe for concurrent use.
	Uniform func() float64
}

// Success is the decision for a successful attempt.
func Success() Decision { return Decision{Verdict: Succeeded} }

// Failed decides what follows a failed attempt of jobType that ended at now.
//
// FATAL goes to the DLQ at once. Anything else is transient: it is retried after the policy's
// wait while attempts remain and the retry would start within the job's lifetime.
func (t *Triager) Failed(jobType string, a Attempt, now time.Time) Decision {
	p := t.Policy(jobType)
	kind := a.Failure.Kind
	if kind != job.KindFatal && t.AlwaysFatal[a.Failure.ErrorType] {
		kind = job.KindFatal
	}
	if kind != job.KindFatal {
		kind = job.KindTransient
	}
	if a.Cause == Reported && kind == job.KindFatal {
		return Decision{Verdict: Dead, Reason: job.DeadFatal, Kind: kind}
	}
	maxAttempts := a.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = p.MaxAttempts
	}
	if a.Number >= maxAttempts {
		return Decision{Verdict: Dead, Reason: exhaustedReason(a.Cause), Kind: kind}
	}
	var retryAfter time.Duration
	if a.Cause == Reported {
		retryAfter = a.Failure.RetryAfter
	}
	at := now.Add(p.Wait(a.Number, t.Uniform(), retryAfter))
	if at.After(a.CreatedAt.Add(p.MaxJobAge)) {
		return Decision{Verdict: Dead, Reason: job.DeadRetryLifetimeExpired, Kind: kind}
	}
	return Decision{Verdict: Retry, RetryAt: at, Kind: kind}
}

// exhaustedReason says how the last attempt ended, so the DLQ can be filtered by it.
func exhaustedReason(c Cause) job.DeadReason {
	switch c {
	case LeaseExpired:
		return job.DeadLeaseExpired
	case Timeout:
		return job.DeadTimeout
	}
	return job.DeadMaxAttemptsExhausted
}
