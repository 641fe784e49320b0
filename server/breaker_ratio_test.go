package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The default breaker (ratio mode) end to end: a broker with no breaker configuration, one
// worker speaking the protocol message by message.

// A few bad payloads, each failing FATAL at once, do not stop their type: 2% of the jobs, among
// the first ones, and the same payloads failing again after an operator requeued them.
func TestDefaultBreakerIgnoresBadPayloads(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	const jobs = 250
	bad := map[int64]bool{}
	for i := range jobs {
		id := b.Enqueue(&jobwirev1.JobSpec{Type: flaky, MaxAttempts: 3})
		if i%10 == 3 && len(bad) < jobs/50 { // 5 bad ones among the first 50
			bad[id] = true
		}
	}
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	run := func(n int) {
		t.Helper()
		for range n {
			a := w.Assignment()
			w.Started(a)
			if bad[a.GetJob().GetId()] {
				w.Fail(a, brokertest.Fatal("ValueError"))
			} else {
				w.Succeed(a)
			}
			if br := breakerOf(t, b, flaky); br.GetState() != stateClosed {
				t.Fatalf("after job %d: breaker %v (%d failures in window), want CLOSED", a.GetJob().GetId(),
					br.GetState(), br.GetFailuresInWindow())
			}
		}
	}
	run(jobs)

	ids := make([]int64, 0, len(bad))
	for id := range bad {
		ids = append(ids, id)
	}
	res, err := b.Admin.RequeueDeadJobs(context.Background(), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: ids}})
	if err != nil || res.GetMatched() != int32(len(ids)) {
		t.Fatalf("requeue the bad payloads: %v, %v", res, err)
	}
	run(len(ids))
}

// A type whose every job fails transiently opens its breaker at the default's minimum number of
// calls, not before.
func TestDefaultBreakerOpensAfterMinCalls(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for range breaker.DefaultMinCalls + 5 {
		b.Enqueue(&jobwirev1.JobSpec{Type: flaky, MaxAttempts: 3})
	}
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	for i := 1; i <= breaker.DefaultMinCalls; i++ {
		a := w.Assignment()
		w.Started(a)
		w.Fail(a, brokertest.Transient("GatewayDown", 0))
		br := breakerOf(t, b, flaky)
		want := stateClosed
		if i == breaker.DefaultMinCalls {
			want = stateOpen
		}
		if br.GetState() != want {
			t.Fatalf("after %d transient failures: breaker %v, want %v", i, br.GetState(), want)
		}
	}
	if m, ok := w.Poll(); ok {
		t.Fatalf("a job was dispatched past the open breaker: %v", m)
	}

	// The listing says why it opened, and a reset shows as taking effect.
	br := breakerOf(t, b, flaky)
	tr := br.GetTrip()
	if br.GetMode() != "ratio" || tr.GetReason() != "ratio" || tr.GetCalls() != breaker.DefaultMinCalls ||
		tr.GetFailures() != breaker.DefaultMinCalls || tr.GetRatio() != 1 ||
		tr.GetWindow().AsDuration() != breaker.DefaultSamplingWindow || len(tr.GetLastFailures()) != breaker.NoteLimit {
		t.Fatalf("open breaker listed as %v, want its trip: %d of %d calls failed, the last %d failures",
			br, breaker.DefaultMinCalls, breaker.DefaultMinCalls, breaker.NoteLimit)
	}
	for _, f := range tr.GetLastFailures() {
		if f.GetJobId() == 0 || f.GetKind() != "transient" || f.GetMessage() != "GatewayDown: dependency unavailable" {
			t.Errorf("trip's failure %v, want a job's transient GatewayDown", f)
		}
	}
	b.Advance(time.Minute)
	res, err := b.Admin.ResetBreaker(context.Background(), &jobwirev1.ResetBreakerRequest{Type: flaky})
	if err != nil {
		t.Fatal(err)
	}
	for _, br := range []*jobwirev1.BreakerInfo{res.GetBreaker(), breakerOf(t, b, flaky)} {
		if br.GetState() != stateClosed || br.GetTrip() != nil || br.GetChangedReason() != "reset" ||
			!br.GetChangedAt().AsTime().Equal(b.Clock.Now()) || br.GetCallsInWindow() != 0 {
			t.Errorf("after a reset: %v, want CLOSED, no trip, reset now, an empty window", br)
		}
	}
}
