package server_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// progressMsg is a Progress message for ref's attempt; fraction < 0 sends none.
func progressMsg(ref *jobwirev1.LeaseRef, fraction float64, message string) *jobwirev1.ConnectRequest {
	p := &jobwirev1.Progress{JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Message: message}
	if fraction >= 0 {
		p.Fraction = proto.Float64(fraction)
	}
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Progress{Progress: p}}
}

// A success's result is stored and returned by GetJob; Welcome says how large one may be.
func TestResultIsStoredAndReturned(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	if got := w.Welcome.GetMaxResultBytes(); got != 1<<20 {
		t.Fatalf("welcome max_result_bytes %d, want %d", got, 1<<20)
	}
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	result := []byte("\x00{\"rows\": 42}\xff")
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), result))
	if d := ack(t, w.Next()).GetDecision(); d != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision %s", d)
	}
	if j := getJob(t, b, id); !bytes.Equal(j.GetResult(), result) || j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job after success: %s result %q, want SUCCEEDED with %q", j.GetState(), j.GetResult(), result)
	}
}

// A result larger than the limit is not stored: the attempt fails FATAL "ResultTooLarge" and
// the job goes DEAD at once, with the sizes in its error.
func TestResultTooLargeIsAFatalFailure(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.MaxResultBytes = 100
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	if got := w.Welcome.GetMaxResultBytes(); got != 100 {
		t.Fatalf("welcome max_result_bytes %d, want 100", got)
	}
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 5})
	a := w.Assignment()
	w.Started(a)
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), bytes.Repeat([]byte("x"), 101)))
	if d := ack(t, w.Next()).GetDecision(); d != jobwirev1.Decision_DECISION_DEAD {
		t.Fatalf("decision %s, want DEAD", d)
	}
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_DEAD || j.GetLastErrorType() != "ResultTooLarge" ||
		!strings.Contains(j.GetLastErrorMessage(), "101 bytes") || len(j.GetResult()) != 0 {
		t.Fatalf("job: %s %s %q result %d bytes; want DEAD ResultTooLarge naming 101 bytes, no result",
			j.GetState(), j.GetLastErrorType(), j.GetLastErrorMessage(), len(j.GetResult()))
	}
	// Exactly the limit is stored.
	id = enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a = w.Assignment()
	w.Started(a)
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), bytes.Repeat([]byte("x"), 100)))
	ack(t, w.Next())
	if n := len(getJob(t, b, id).GetResult()); n != 100 {
		t.Fatalf("result of exactly the limit: %d bytes stored", n)
	}
}

// Progress is stored on the running attempt, the newest kept, shown by GetJob; progress sent
// in a batch counts as sent alone; a report breaking the rules (proto3 itself refuses a
// message that is not UTF-8) is refused INVALID_ARGUMENT
// with the reason and the job goes on; a stale lease is refused FAILED_PRECONDITION.
func TestProgressIsStoredAndChecked(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	ref := brokertest.Ref(a)
	w.Started(a)
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Batch{Batch: &jobwirev1.ConnectRequestBatch{
		Messages: []*jobwirev1.ConnectRequest{progressMsg(ref, 0.1, "one"), progressMsg(ref, 0.5, "half way")}}}})
	brokertest.WaitFor(t, "progress stored", func() bool {
		return getJob(t, b, id).GetProgress().GetMessage() == "half way"
	})
	p := getJob(t, b, id).GetProgress()
	if p.GetFraction() != 0.5 || p.Fraction == nil || p.GetAttempt() != 1 || p.GetUpdatedAt() == nil {
		t.Fatalf("progress %v, want 0.5 \"half way\" of attempt 1", p)
	}
	for _, bad := range []struct {
		fraction float64
		message  string
		want     string
	}{
		{1.5, "", "outside 0..1"},
		{-1, strings.Repeat("é", 129), "at most 256"},
	} {
		w.Send(progressMsg(ref, bad.fraction, bad.message))
		r := w.Next().GetRefused()
		if codes.Code(r.GetCode()) != codes.InvalidArgument || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_PROGRESS ||
			!strings.Contains(r.GetMessage(), bad.want) {
			t.Fatalf("progress %v %q: %v; want INVALID_ARGUMENT naming %q", bad.fraction, bad.message, r, bad.want)
		}
	}
	// Only a message: no fraction.
	w.Send(progressMsg(ref, -1, "almost"))
	brokertest.WaitFor(t, "message-only progress", func() bool { return getJob(t, b, id).GetProgress().GetMessage() == "almost" })
	if getJob(t, b, id).GetProgress().Fraction != nil {
		t.Fatal("a message-only report kept the old fraction")
	}
	ack(t, w.Succeed(a))
	w.Send(progressMsg(ref, 1, "after the end"))
	r := w.Next().GetRefused()
	if codes.Code(r.GetCode()) != codes.FailedPrecondition || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_PROGRESS {
		t.Fatalf("progress of a finished job: %v; want FAILED_PRECONDITION PROGRESS", r)
	}
	if got := getJob(t, b, id).GetProgress().GetMessage(); got != "almost" {
		t.Fatalf("progress after the job finished: %q, want the last one kept", got)
	}
}
