package server_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A Result sent again is answered as the first was: back to back, each copy gets the same
// ResultAck; after the answer, a repeat within the memory window gets it again; later, or with
// another outcome, it is refused.
func TestRepeatedResultGetsTheSameAck(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 3})
	a := w.Assignment()
	w.Started(a)
	// A fatal failure, so that the job is not assigned again while the test moves the clock.
	failure := brokertest.Fatal("ValueError")
	w.SendResult(brokertest.Ref(a), failure)
	w.SendResult(brokertest.Ref(a), failure)
	first, second := ack(t, w.Next()), ack(t, w.Next())
	if first.GetDecision() != jobwirev1.Decision_DECISION_DEAD || !proto.Equal(first, second) {
		t.Fatalf("back to back: %v then %v; want the same DEAD ack twice", first, second)
	}
	b.Clock.Advance(500 * time.Millisecond)
	if again := ack(t, w.Report(brokertest.Ref(a), failure)); !proto.Equal(again, first) {
		t.Fatalf("0.5s after the ack: %v; want %v again", again, first)
	}
	// Another outcome for the same lease is not a repeat.
	if r := w.Report(brokertest.Ref(a), nil).GetRefused(); codes.Code(r.GetCode()) != codes.FailedPrecondition ||
		r.GetMessage() != "a different result for this lease is already stored" {
		t.Fatalf("success after a stored failure: %v; want FAILED_PRECONDITION", r)
	}
	b.Clock.Advance(5*time.Minute + time.Second)
	if r := w.Report(brokertest.Ref(a), failure).GetRefused(); codes.Code(r.GetCode()) != codes.FailedPrecondition {
		t.Fatalf("repeat after the memory window: %v; want FAILED_PRECONDITION", r)
	}
}

// A worker whose stream broke after it sent a Result, before the answer came, reconnects with
// the lease in Hello.held: it is not reported lost, and the Result sent again gets its ack.
func TestResultResentAfterReconnectGetsItsAck(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	w.SendResult(brokertest.Ref(a), nil)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	w.Kill()

	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(a)}
	w2 := b.Connect(hello)
	if lost := w2.Welcome.GetLost(); len(lost) != 0 {
		t.Fatalf("welcome lists %v as lost; a lease whose result is stored is not lost", lost)
	}
	if r := ack(t, w2.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED || r.GetJobId() != id {
		t.Fatalf("resent result: %v; want the SUCCEEDED ack of job %d", r, id)
	}
}

// A Result with another outcome that arrives while the first is being stored is not a repeat:
// the first wins, and the second is refused at once with FAILED_PRECONDITION instead of being
// given the first one's ack. A copy of the first that arrives meanwhile gets the first's ack.
func TestDifferentResultWhileTheFirstIsStoredIsRefused(t *testing.T) {
	t.Parallel()
	faults := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: faults})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 3})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)

	// Hold the writer in a heartbeat's write, so that the failure waits to be stored.
	entered, release := faults.Hold("heartbeat")
	defer release()
	w.Send(brokertest.HeartbeatMsg(brokertest.Ref(a)))
	select {
	case <-entered:
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the heartbeat's write never began")
	}
	failure := brokertest.Fatal("ValueError")
	w.SendResult(brokertest.Ref(a), failure)
	w.SendResult(brokertest.Ref(a), nil)     // another outcome for the same attempt
	w.SendResult(brokertest.Ref(a), failure) // the same one again
	// The session refuses an unknown lease at once: once this answer comes, all three results
	// before it were read while the first was still waiting to be stored.
	unknown := &jobwirev1.LeaseRef{JobId: 1 << 40, LeaseToken: "1.00000000000000000000000000000000"}
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{Leases: []*jobwirev1.LeaseRef{unknown}}}})
	var before []*jobwirev1.ConnectResponse
	for {
		m := w.Next()
		if m.GetHeartbeatAck() != nil {
			continue
		}
		if r := m.GetRefused(); r.GetJobId() == unknown.GetJobId() {
			break
		}
		before = append(before, m)
	}
	release()
	if len(before) != 1 {
		t.Fatalf("while the first result was stored, the broker answered %v; want one refusal", before)
	}
	r := before[0].GetRefused()
	if r.GetJobId() != id || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT ||
		codes.Code(r.GetCode()) != codes.FailedPrecondition ||
		r.GetMessage() != "a different result for this lease is already being stored" {
		t.Fatalf("success sent while a failure was stored: %v; want FAILED_PRECONDITION naming the other result", before[0])
	}
	var acks []*jobwirev1.ResultAck
	for len(acks) < 2 {
		if m := w.Next(); m.GetHeartbeatAck() == nil { // the held heartbeat's own answer
			acks = append(acks, ack(t, m))
		}
	}
	first, second := acks[0], acks[1]
	if first.GetDecision() != jobwirev1.Decision_DECISION_DEAD || !proto.Equal(first, second) {
		t.Fatalf("the failure and its copy: %v then %v; want the same DEAD ack twice", first, second)
	}
	got := b.WaitState(id, jobwirev1.JobState_JOB_STATE_DEAD)
	if h := got.GetAttemptHistory(); len(h) != 1 || slices.ContainsFunc(h, func(at *jobwirev1.Attempt) bool {
		return at.GetOutcome() == jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED
	}) {
		t.Fatalf("job %d has attempts %v; want the one failed attempt", id, h)
	}
}

// A Result for a lease whose Release is being stored is refused at once: the job never
// started, so it has no result, and the Release's answer is not the Result's.
func TestResultWhileTheReleaseIsStoredIsRefused(t *testing.T) {
	t.Parallel()
	faults := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: faults})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()

	// Hold the writer in a heartbeat's write, so that the Release waits to be stored.
	entered, release := faults.Hold("heartbeat")
	defer release()
	w.Send(brokertest.HeartbeatMsg(brokertest.Ref(a)))
	select {
	case <-entered:
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the heartbeat's write never began")
	}
	w.Release(brokertest.Ref(a))
	w.SendResult(brokertest.Ref(a), nil)
	var r *jobwirev1.Refused
	for r == nil {
		if m := w.Next(); m.GetHeartbeatAck() == nil {
			r = m.GetRefused()
			if r == nil {
				t.Fatalf("while the Release was stored, the broker answered %v; want the Result refused", m)
			}
		}
	}
	release()
	if r.GetJobId() != id || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT ||
		codes.Code(r.GetCode()) != codes.FailedPrecondition ||
		r.GetMessage() != "the lease is being released: its job never started, so it has no result" {
		t.Fatalf("a Result while the Release was stored: %v; want FAILED_PRECONDITION saying the lease is being released", r)
	}
	// The Release was stored: the job is free again, and the slot it took is offered it anew.
	m := w.Next()
	if m.GetHeartbeatAck() != nil { // the held heartbeat's own answer
		m = w.Next()
	}
	if again := m.GetAssignment(); again.GetJob().GetId() != id || again.GetLeaseToken() == a.GetLeaseToken() {
		t.Fatalf("after the Release: %v; want job %d assigned under a new lease", m, id)
	}
}
