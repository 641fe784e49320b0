package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// batchOf wraps worker messages in one batch frame.
func batchOf(msgs ...*jobwirev1.ConnectRequest) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Batch{Batch: &jobwirev1.ConnectRequestBatch{Messages: msgs}}}
}

// frameReader reads the broker's frames and unpacks batches, counting what it saw.
type frameReader struct {
	t       *testing.T
	w       *brokertest.RawWorker
	pending []*jobwirev1.ConnectResponse
	batches int // batch frames seen
	largest int // most messages in one batch
}

// next returns the broker's next message, unpacking a batch frame; it fails the test on a
// batch that breaks the protocol's rules (fewer than two messages, more than 1024, nested).
func (r *frameReader) next() *jobwirev1.ConnectResponse {
	r.t.Helper()
	if len(r.pending) == 0 {
		m := r.w.Next()
		b := m.GetBatch()
		if b == nil {
			return m
		}
		n := len(b.GetMessages())
		if n < 2 || n > 1024 {
			r.t.Fatalf("a batch of %d messages, want 2..1024", n)
		}
		for _, inner := range b.GetMessages() {
			if inner.GetBatch() != nil || inner.GetWelcome() != nil {
				r.t.Fatalf("a batch holds %v", inner)
			}
		}
		r.batches++
		r.largest = max(r.largest, n)
		r.pending = b.GetMessages()
	}
	m := r.pending[0]
	r.pending = r.pending[1:]
	return m
}

// runRound enqueues n jobs, takes their n assignments, reports Started and then success for
// all of them in two batch frames, and reads the n acks.
func runRound(t *testing.T, b *brokertest.Bundle, r *frameReader, typ string, n int) {
	t.Helper()
	for range n {
		enqueue(t, b, &jobwirev1.JobSpec{Type: typ})
	}
	var started, results []*jobwirev1.ConnectRequest
	for range n {
		m := r.next()
		a := m.GetAssignment()
		if a == nil {
			t.Fatalf("expected an assignment, got %v", m)
		}
		started = append(started, brokertest.StartedMsg(brokertest.Ref(a)))
		results = append(results, brokertest.ResultMsg(brokertest.Ref(a), nil))
	}
	r.w.Send(batchOf(started...))
	r.w.Send(batchOf(results...))
	for range n {
		if a := ack(t, r.next()); a.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
			t.Fatalf("decision %s, want SUCCEEDED", a.GetDecision())
		}
	}
}

// A worker that accepts batches gets the messages ready at once as batch frames, and its own
// batches of Started and Result are applied as if sent one by one: every job succeeds once.
func TestBatchFramesBothWays(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	hello := brokertest.Hello("batcher", 64, "t")
	hello.AcceptsBatches = true
	r := &frameReader{t: t, w: b.Connect(hello)}
	// Whether two messages are ready at the same moment depends on the broker's goroutines, so
	// run rounds until one batch came back.
	deadline := time.Now().Add(brokertest.WaitTimeout)
	rounds := 0
	for r.batches == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no batch frame in %d rounds of 64 jobs", rounds)
		}
		runRound(t, b, r, "t", 64)
		rounds++
	}
	t.Logf("%d rounds; %d batch frames, the largest of %d messages", rounds, r.batches, r.largest)
}

// A worker whose Hello does not accept batches never receives one, however many messages are
// ready at once; it may still send batches of its own.
func TestNoBatchForAWorkerThatDidNotAskForThem(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for range 64 {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	}
	r := &frameReader{t: t, w: b.Connect(brokertest.Hello("old", 64, "t"))}
	var results []*jobwirev1.ConnectRequest
	for range 64 {
		results = append(results, brokertest.ResultMsg(brokertest.Ref(r.w.Assignment()), nil))
	}
	r.w.Send(batchOf(results...))
	for range 64 {
		ack(t, r.next())
	}
	if r.batches != 0 {
		t.Fatalf("an old worker got %d batch frames", r.batches)
	}
}

// Batches that break the rules end the stream with INVALID_ARGUMENT naming the rule, before
// any of their messages is applied; a batch at the size limit is taken.
func TestBatchRefusals(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	bogus := &jobwirev1.LeaseRef{JobId: 1, LeaseToken: "1.00000000000000000000000000000000"}
	startedTimes := func(n int) []*jobwirev1.ConnectRequest {
		out := make([]*jobwirev1.ConnectRequest, n)
		for i := range out {
			out[i] = brokertest.StartedMsg(bogus)
		}
		return out
	}
	tests := []struct {
		name  string
		frame *jobwirev1.ConnectRequest
		want  string // the INVALID_ARGUMENT message's start; "" for accepted
	}{
		{"at the size limit", batchOf(startedTimes(1024)...), ""},
		{"over the size limit", batchOf(startedTimes(1025)...), "batch.messages: holds 1025 messages, more than the limit of 1024"},
		{"empty", batchOf(), "batch.messages: must hold at least one message"},
		{"nested", batchOf(brokertest.StartedMsg(bogus), batchOf(brokertest.StartedMsg(bogus))), "batch.messages[1]: is a batch: batches do not nest"},
		{"hello inside", batchOf(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: brokertest.Hello("w", 1, "t")}}),
			"batch.messages[0]: is hello"},
		{"drain inside", batchOf(brokertest.StartedMsg(bogus), &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}}),
			"batch.messages[1]: is drain: drain must be sent alone"},
		{"empty message inside", batchOf(&jobwirev1.ConnectRequest{}), "batch.messages[0]: is empty or of an unknown type"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := b.Connect(brokertest.Hello(fmt.Sprintf("w%d", i), 1, "t"))
			w.Send(tt.frame)
			if tt.want == "" {
				// The stream lives on: a heartbeat after the batch is answered.
				if m := w.Heartbeat(); m.GetHeartbeatAck() == nil && m.GetRefused() == nil {
					t.Fatalf("after the batch: %v, want the heartbeat answered", m)
				}
				return
			}
			err := w.Err()
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tt.want) {
				t.Fatalf("%v, want INVALID_ARGUMENT %q", err, tt.want)
			}
		})
	}
}

// A batch is no way around the stream's message budget: each message in it counts, and each
// lease its heartbeats name.
func TestBatchCountsEachMessageAgainstTheBudget(t *testing.T) {
	t.Parallel()
	limits := withRate(10)
	b := brokertest.New(t, brokertest.Options{Limits: limits})
	hb := brokertest.HeartbeatMsg()
	// Five heartbeats naming a lease each, in one frame, take the whole budget of ten (the fake
	// clock stands still); each is answered, so all are known to be counted...
	w := b.Connect(brokertest.Hello("full", 1, "t"))
	one := brokertest.HeartbeatMsg(&jobwirev1.LeaseRef{JobId: 1, LeaseToken: "x"})
	w.Send(batchOf(one, one, one, one, one))
	for range 5 {
		if m := w.Next(); m.GetRefused() == nil && m.GetHeartbeatAck() == nil {
			t.Fatalf("a heartbeat for a bogus lease: %v, want it answered", m)
		}
	}
	// ...so one more, alone, is over it.
	w.Send(hb)
	if err := w.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an 11th message after a batch of 10 at 10 a second: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Eleven in one frame are over it at once.
	w2 := b.Connect(brokertest.Hello("eleven", 1, "t"))
	w2.Send(batchOf(hb, hb, hb, hb, hb, hb, hb, hb, hb, hb, hb))
	if err := w2.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a batch of 11 at 10 a second: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Leases count too: two heartbeats of five leases each and one more message is 13.
	w3 := b.Connect(brokertest.Hello("wide", 5, "t"))
	five := make([]*jobwirev1.LeaseRef, 5)
	for i := range five {
		five[i] = &jobwirev1.LeaseRef{JobId: int64(i + 1), LeaseToken: "x"}
	}
	w3.Send(batchOf(brokertest.HeartbeatMsg(five...), brokertest.HeartbeatMsg(five...), hb))
	if err := w3.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a batch worth 13 messages at 10 a second: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func withRate(rate int) server.Limits {
	l := server.DefaultLimits()
	l.MaxStreamMessageRate = rate
	return l
}

// A message of a batch that breaks its own rule (a Result without an outcome, a Heartbeat naming
// more leases than the stream's capacity) refuses the whole frame too: the messages before it
// are not applied.
func TestBatchWithABadMessageAppliesNoneOfIt(t *testing.T) {
	t.Parallel()
	lease := &jobwirev1.LeaseRef{JobId: 1, LeaseToken: "x"}
	tests := []struct {
		name string
		bad  *jobwirev1.ConnectRequest
		want string
	}{
		{"result without outcome", &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{JobId: 7}}},
			"result for job 7: outcome must be success or failure"},
		{"heartbeat over capacity", brokertest.HeartbeatMsg(lease, lease), "heartbeat.leases: lists 2 leases, more than the capacity of 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := brokertest.New(t, brokertest.Options{})
			id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
			w := b.Connect(brokertest.Hello("w", 1, "t"))
			a := w.Assignment()
			w.Send(batchOf(brokertest.StartedMsg(brokertest.Ref(a)), tt.bad))
			if err := w.Err(); status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tt.want) {
				t.Fatalf("%v, want INVALID_ARGUMENT %q", err, tt.want)
			}
			// A write through the broker's one writer after the frame: had the Started been
			// submitted, it would be committed once this is.
			if _, err := b.Admin.PurgeFinishedJobs(t.Context(), &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			j, err := b.Producer.GetJob(t.Context(), &jobwirev1.GetJobRequest{Id: id})
			if err != nil {
				t.Fatal(err)
			}
			if got := j.GetJob().GetAttempts(); got != 0 {
				t.Fatalf("the job has %d attempts, state %s: the Started before the bad message was applied", got, j.GetJob().GetState())
			}
		})
	}
}
