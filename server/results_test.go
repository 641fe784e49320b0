package server_test

import (
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
	waitState(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
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
