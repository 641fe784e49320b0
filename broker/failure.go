package broker

import (
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/triage"
)

// timeoutErrorType is the error type of every attempt that outlived its timeout, whether the
// broker cut it off or the worker reported it, so the dead-letter queue groups them together.
const timeoutErrorType = "TIMEOUT"

// leaseExpiredErrorType is the error type of an attempt whose lease ran out while it ran.
const leaseExpiredErrorType = "LEASE_EXPIRED"

func timeoutMessage(j *job.Job) string {
	return fmt.Sprintf("attempt ran past its timeout of %s", j.AttemptTimeout)
}

// triageFailure decides what follows a failure a worker reported for attempt a of j, and fills
// in a. A failure the worker marked timed out is a timeout like one the sweep finds: outcome
// TIMEOUT, transient whatever kind it carries, dead as TIMEOUT when no attempts are left.
func (b *Broker) triageFailure(j *job.Job, a job.Attempt, f job.Failure, now time.Time) (triage.Decision, job.Attempt) {
	ta := triage.Attempt{Number: a.Number, MaxAttempts: j.MaxAttempts, CreatedAt: j.LifetimeStart(),
		Cause: triage.Reported, Failure: f}
	a.Outcome, a.ErrorType, a.Message, a.Details = job.OutcomeFailed, f.ErrorType, f.Message, f.Details
	if f.TimedOut {
		ta.Cause, ta.Failure = triage.Timeout, job.Failure{Kind: job.KindTransient}
		a.Outcome, a.ErrorType = job.OutcomeTimeout, timeoutErrorType
		if a.Message == "" {
			a.Message = timeoutMessage(j)
		}
	}
	d := b.triager.Failed(j.Type, ta, now)
	a.FailureKind = d.Kind
	return d, a
}
