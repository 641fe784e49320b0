package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
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

// An idempotency key names one job of a type. A repeat with the same content is answered with
// that job; a repeat whose content differs is refused with ALREADY_EXISTS naming what differs.
func TestIdempotencyKeyConflicts(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	spec := func(change func(*jobwirev1.JobSpec)) *jobwirev1.JobSpec {
		s := &jobwirev1.JobSpec{Type: "t", Queue: "q", Payload: []byte(`{"n":1}`), Priority: 5, MaxAttempts: 3,
			AttemptTimeout: durationpb.New(time.Minute), IdempotencyKey: "order-17"}
		if change != nil {
			change(s)
		}
		return s
	}
	first := enqueue(t, b, spec(nil))
	tests := []struct {
		name   string
		change func(*jobwirev1.JobSpec)
		want   string // "" for a duplicate
	}{
		{"same content", nil, ""},
		{"another delay", func(s *jobwirev1.JobSpec) { s.Schedule = &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)} }, ""},
		{"queue", func(s *jobwirev1.JobSpec) { s.Queue = "other" }, "whose queue differs"},
		{"payload", func(s *jobwirev1.JobSpec) { s.Payload = []byte(`{"n":2}`) }, "whose payload differs"},
		{"priority", func(s *jobwirev1.JobSpec) { s.Priority = 6 }, "whose priority differs"},
		{"max attempts", func(s *jobwirev1.JobSpec) { s.MaxAttempts = 0 }, "whose max_attempts differs"},
		{"attempt timeout", func(s *jobwirev1.JobSpec) { s.AttemptTimeout = nil }, "whose attempt_timeout differs"},
		{"several", func(s *jobwirev1.JobSpec) { s.Queue, s.Priority, s.Payload = "", 0, nil }, "whose queue, payload and priority differ"},
	}
	for _, tt := range tests {
		res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec(tt.change)})
		if tt.want == "" {
			if err != nil || !res.GetJob().GetDuplicate() || res.GetJob().GetId() != first {
				t.Errorf("%s: %v, %v; want a duplicate of job %d", tt.name, res.GetJob(), err, first)
			}
			continue
		}
		if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), tt.want) ||
			!strings.Contains(status.Convert(err).Message(), fmt.Sprintf(`idempotency key "order-17" of type "t" belongs to job %d`, first)) {
			t.Errorf("%s: %v; want ALREADY_EXISTS saying %q", tt.name, err, tt.want)
		}
	}
	// Keys are scoped by type: the same key is free for another type.
	other := spec(func(s *jobwirev1.JobSpec) { s.Type = "u" })
	if res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: other}); err != nil || res.GetJob().GetDuplicate() {
		t.Fatalf("key of type t reused for type u: %v, %v; want a new job", res.GetJob(), err)
	}
	if n := countJobs(t, b); n != 2 {
		t.Fatalf("%d jobs stored, want 2", n)
	}
}

// A batch is all or nothing: a conflicting spec refuses it, naming the spec. Two specs of one
// batch with the same key and content are one job.
func TestIdempotencyKeyConflictInBatch(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	keyed := func(payload string) *jobwirev1.JobSpec {
		return &jobwirev1.JobSpec{Type: "t", Payload: []byte(payload), IdempotencyKey: "k"}
	}
	res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
		keyed("a"), {Type: "t"}, keyed("a")}})
	if err != nil {
		t.Fatal(err)
	}
	if js := res.GetJobs(); js[0].GetDuplicate() || !js[2].GetDuplicate() || js[2].GetId() != js[0].GetId() {
		t.Fatalf("batch with one key twice = %v, want the third a duplicate of the first", js)
	}
	_, err = b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
		{Type: "t"}, keyed("a"), keyed("b")}})
	want := fmt.Sprintf(`jobs[2]: idempotency key "k" of type "t" belongs to job %d, whose payload differs`, res.GetJobs()[0].GetId())
	if status.Code(err) != codes.AlreadyExists || !strings.HasPrefix(status.Convert(err).Message(), want) {
		t.Fatalf("conflicting batch: %v; want ALREADY_EXISTS starting %q", err, want)
	}
	if n := countJobs(t, b); n != 2 {
		t.Fatalf("%d jobs stored, want the 2 of the first batch: the refused batch stored nothing", n)
	}
}

// A key is free again once its job is deleted (here by purging the dead-letter queue; retention
// deletes the same way).
func TestIdempotencyKeyFreedWithItsJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", IdempotencyKey: "k"})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	w.Started(a)
	ack(t, w.Fail(a, brokertest.Fatal("ValueError")))
	if _, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t", IdempotencyKey: "k", Payload: []byte("new")}})
	if err != nil || res.GetJob().GetDuplicate() || res.GetJob().GetId() == id {
		t.Fatalf("key of a purged job: %v, %v; want a new job", res.GetJob(), err)
	}
}

func countJobs(t *testing.T, b *brokertest.Bundle) int {
	t.Helper()
	res, err := b.Admin.ListJobs(context.Background(), &jobwirev1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.GetJobs())
}
