package server_test

import (
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// These tests show what docs/protocol.md says the broker does in the corners a worker author
// asks about.

// A Started lost with its stream (the broker never read it) leaves the job LEASED, but the job
// may be running on the worker: the stream's end keeps its lease, the worker's reconnect adopts
// it (it is not listed lost), and the result it then reports is stored as the job's one
// attempt.
func TestStartedLostWithTheStreamKeepsTheLease(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Kill() // the worker sent Started, but it never arrived
	b.WaitStreams(0)
	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(a)}
	w2 := b.Connect(hello)
	if lost := w2.Welcome.GetLost(); len(lost) != 0 {
		t.Fatalf("welcome.lost = %v, want job %d's lease adopted", lost, id)
	}
	if r := ack(t, w2.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision %s, want SUCCEEDED", r.GetDecision())
	}
	if j := getJob(t, b, id); j.GetAttempts() != 1 || len(j.GetAttemptHistory()) != 1 {
		t.Fatalf("job %d: %d attempts, history %v; want the one attempt", id, j.GetAttempts(), j.GetAttemptHistory())
	}
}

// Started is never answered. A start the broker could not store is not refused: the Result
// records the attempt by itself.
func TestStartThatCouldNotBeStoredIsRecordedByTheResult(t *testing.T) {
	t.Parallel()
	f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	f.InjectEveryCall(brokertest.FaultBefore, 100, "start")
	b := brokertest.New(t, brokertest.Options{Faults: f})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	brokertest.WaitFor(t, "start to be retried past the limit", func() bool { return f.Tries("start") > brokertest.DefaultFaultRetries.MaxTransientRetries })
	// Messages come in order: a Refused for the start would come before the result's answer.
	if r := ack(t, w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision %s, want SUCCEEDED", r.GetDecision())
	}
	if j := getJob(t, b, id); j.GetAttempts() != 1 || len(j.GetAttemptHistory()) != 1 {
		t.Fatalf("job %d: %d attempts, history %v; want the one attempt recorded", id, j.GetAttempts(), j.GetAttemptHistory())
	}
}

// A Result with no Started before it is accepted: the attempt counts, started when the Result
// arrived.
func TestResultWithoutStartedCountsTheAttempt(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 2})
	a := w.Assignment()
	b.Clock.Advance(time.Second)
	if r := ack(t, w.Fail(a, brokertest.Transient("E", 0))); r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
		t.Fatalf("decision %s, want RETRY", r.GetDecision())
	}
	j := getJob(t, b, id)
	h := j.GetAttemptHistory()
	if j.GetAttempts() != 1 || len(h) != 1 || !h[0].GetStartedAt().AsTime().Equal(b.Clock.Now()) {
		t.Fatalf("job %d: %d attempts, history %v; want one attempt started when the result came (%s)", id, j.GetAttempts(), h, b.Clock.Now())
	}
}

// Half-closing the stream ends the session at once: the broker ends the stream with OK without
// waiting for answers still owed, a job that never started goes back to PENDING, and a running
// one keeps its lease until a new stream adopts it or the lease expires.
func TestHalfCloseWhileHoldingLeases(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 2, "t"))
	running := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	leased := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Assignment()
	w.Started(a)
	b.WaitState(running, jobwirev1.JobState_JOB_STATE_RUNNING)
	w.HalfClose()
	if err := w.Err(); err == nil || err.Error() != "EOF" {
		t.Fatalf("stream ended with %v, want the broker's OK (EOF)", err)
	}
	b.WaitState(leased, jobwirev1.JobState_JOB_STATE_PENDING)
	if j := getJob(t, b, running); j.GetState() != jobwirev1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("running job is %s after the half-close, want RUNNING until its lease expires", j.GetState())
	}
	b.Advance(brokertest.DefaultConfig().LeaseDuration)
	j := b.WaitState(running, jobwirev1.JobState_JOB_STATE_SCHEDULED)
	if h := j.GetAttemptHistory(); len(h) != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED {
		t.Fatalf("history %v, want one LEASE_EXPIRED attempt", h)
	}
}
