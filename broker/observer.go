package broker

import (
	"context"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/triage"
)

// Observer hears what happens to jobs, for metrics. Its methods run on the broker's hot paths,
// some on the writer goroutine and some under the broker's lock, so they must be cheap and
// must never block or call back into the broker.
type Observer interface {
	// JobEnqueued: a new job was stored (a duplicate idempotency key is not counted).
	JobEnqueued(queue, jobType string)
	// AttemptStarted: user code began an attempt; wait is how long the job had been ready.
	AttemptStarted(queue, jobType string, wait time.Duration)
	// AttemptEnded: an attempt's outcome was stored.
	AttemptEnded(queue, jobType string, end AttemptEnd)
	// JobCancelled: a job that had not finished was cancelled.
	JobCancelled(queue, jobType string)
	// LeaseExpired: a lease ran out before its worker reported (started or not).
	LeaseExpired(queue string)
	// BreakerTransition: a job type's breaker changed state.
	BreakerTransition(jobType string, from, to breaker.State, reason breaker.Reason)
	// BatchCommitted: the writer committed (or failed) one transaction of ops operations.
	BatchCommitted(ops int, took time.Duration, err error)
}

// FailureCause says how an attempt failed.
type FailureCause int

const (
	// CauseNone: the attempt succeeded.
	CauseNone FailureCause = iota
	// CauseTransient: the worker reported a transient (or unspecified) failure.
	CauseTransient
	// CauseFatal: the worker reported a fatal failure, or the error type is always fatal.
	CauseFatal
	// CauseLeaseExpired: the lease ran out while user code ran.
	CauseLeaseExpired
	// CauseTimeout: the attempt outlived its attempt timeout.
	CauseTimeout
)

var causeNames = [...]string{"none", "transient", "fatal", "lease_expired", "timeout"}

func (c FailureCause) String() string {
	if c >= 0 && int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "unknown"
}

// AttemptEnd is how one attempt ended and what the broker decided.
type AttemptEnd struct {
	Cause    FailureCause
	Verdict  triage.Verdict
	Dead     job.DeadReason // when Verdict is triage.Dead
	Duration time.Duration  // from the attempt's start to its end, on the broker's clock
	// Unstarted: the job ended without an attempt (its assignment could not be delivered):
	// its verdict counts, as no attempt, failure or duration does.
	Unstarted bool
}

// nopObserver is the observer of a broker built without one.
type nopObserver struct{}

func (nopObserver) JobEnqueued(string, string)                                             {}
func (nopObserver) AttemptStarted(string, string, time.Duration)                           {}
func (nopObserver) AttemptEnded(string, string, AttemptEnd)                                {}
func (nopObserver) JobCancelled(string, string)                                            {}
func (nopObserver) LeaseExpired(string)                                                    {}
func (nopObserver) BreakerTransition(string, breaker.State, breaker.State, breaker.Reason) {}
func (nopObserver) BatchCommitted(int, time.Duration, error)                               {}

// failureCause names how a reported failure failed, from the triage decision's kind.
func failureCause(k job.FailureKind) FailureCause {
	if k == job.KindFatal {
		return CauseFatal
	}
	return CauseTransient
}

// Ready reports whether the broker accepts work: it is not shutting down, it reaches its
// database (Unreachable) and its storage answers a read.
func (b *Broker) Ready(ctx context.Context) error {
	b.mu.Lock()
	down := b.shuttingDown
	b.mu.Unlock()
	if down {
		return ErrShuttingDown
	}
	if err := b.Unreachable(); err != nil {
		return err
	}
	_, err := b.st.QueueLoadAll(ctx)
	return err
}
