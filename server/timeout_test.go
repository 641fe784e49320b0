package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A failure the worker marks timed_out is recorded as a timeout: outcome TIMEOUT on every
// attempt, and the job dies with reason TIMEOUT, as when the broker cuts the attempt off.
func TestWorkerReportedTimeoutIsATimeout(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 2, AttemptTimeout: durationpb.New(time.Second)})
	for n := range 2 {
		if n > 0 {
			b.Advance(time.Hour) // past the backoff
		}
		a := w.Assignment()
		w.Started(a)
		// Even a timed-out failure the worker calls FATAL, with a retry-after, is a timeout.
		r := ack(t, w.Fail(a, &jobwirev1.Failure{Kind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, TimedOut: true,
			ErrorType: "context.deadlineExceededError", Message: "context deadline exceeded", RetryAfter: durationpb.New(time.Minute)}))
		if n == 0 && r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
			t.Fatalf("first timeout: decision %s, want RETRY", r.GetDecision())
		}
		if n == 1 && (r.GetDecision() != jobwirev1.Decision_DECISION_DEAD || r.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_TIMEOUT) {
			t.Fatalf("last timeout: %s %s, want DEAD TIMEOUT", r.GetDecision(), r.GetDeadReason())
		}
	}
	j := getJob(t, b, id)
	if j.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_TIMEOUT || j.GetLastErrorType() != "TIMEOUT" {
		t.Fatalf("job dead as %s with error type %q, want TIMEOUT and TIMEOUT", j.GetDeadReason(), j.GetLastErrorType())
	}
	for _, at := range j.GetAttemptHistory() {
		if at.GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT || at.GetFailureKind() != jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT ||
			at.GetMessage() != "context deadline exceeded" {
			t.Errorf("attempt %d: %s %s %q, want TIMEOUT, TRANSIENT and the worker's message", at.GetNumber(), at.GetOutcome(), at.GetFailureKind(), at.GetMessage())
		}
	}
}
