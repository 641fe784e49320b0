package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A job's rate key is taken when it is enqueued: jobs enqueued before a keyed limit existed
// all count under the empty key, whatever their payloads say, so they share one bucket
// (docs/scheduling.md, "a job enqueued before a keyed limit existed counts under the empty key").
func TestRateLimitKeyOfAJobEnqueuedBeforeTheLimitIsEmpty(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	var ids []int64
	for _, c := range []string{"acme", "globex"} {
		s := spec("sync")
		s.Payload = []byte(`{"customer_id": "` + c + `"}`)
		ids = append(ids, b.Enqueue(s))
	}
	setRateLimit(t, b, &jobwirev1.RateLimit{Name: "per-customer", Type: "sync", Key: "payload.customer_id",
		Rate: 1, Interval: durationpb.New(time.Minute)})
	w := b.Connect(brokertest.Hello("w1", 10, "sync"))
	if id := w.Assignment().GetJob().GetId(); id != ids[0] {
		t.Fatalf("handed out job %d first, want %d", id, ids[0])
	}
	brokertest.WaitFor(t, "the second job to wait for the key's limit", func() bool {
		return waiting(t, b, ids[1]).GetWaiting().GetReason() == jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED_KEY
	})
	if r := waiting(t, b, ids[1]); r.GetJob().GetRateKey() != "" {
		t.Fatalf("the second job's rate key %q, want the empty key", r.GetJob().GetRateKey())
	}
	if n := leasedNow(t, b); n != 1 {
		t.Fatalf("%d jobs leased, want one: both count under the empty key", n)
	}
}
