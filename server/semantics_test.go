package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A run_at in the past is stored as now: a job enqueued for 1970 waits behind the jobs of its
// priority that were there before it, like any job enqueued now.
func TestRunAtInThePastIsClampedToNow(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	first := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	for _, at := range []time.Time{time.Unix(0, 0), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), b.Clock.Now().Add(-time.Nanosecond)} {
		res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t",
			Schedule: &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(at)}}})
		if err != nil {
			t.Fatalf("enqueue for %s: %v", at, err)
		}
		if got := res.GetJob().GetRunAt().AsTime(); !got.Equal(b.Clock.Now()) {
			t.Errorf("run_at %s stored as %s, want now (%s)", at, got, b.Clock.Now())
		}
		if got := getJob(t, b, res.GetJob().GetId()).GetRunAt().AsTime(); !got.Equal(b.Clock.Now()) {
			t.Errorf("run_at %s: job reads %s, want now", at, got)
		}
	}
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	if a := w.Assignment(); a.GetJob().GetId() != first {
		t.Fatalf("first assignment is job %d, want %d, enqueued first for now", a.GetJob().GetId(), first)
	}
}
