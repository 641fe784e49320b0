package server_test

import (
	"bytes"
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

func TestBadInputIsInvalidArgument(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	now := brokertest.Start
	ok := func() *jobwirev1.JobSpec { return &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"} }
	with := func(f func(*jobwirev1.JobSpec)) *jobwirev1.JobSpec { s := ok(); f(s); return s }
	tests := []struct {
		name string
		spec *jobwirev1.JobSpec
		want string // the field the message must name
	}{
		{"missing job", nil, "job: is required"},
		{"empty type", with(func(s *jobwirev1.JobSpec) { s.Type = "" }), "job.type: must be 1..255 characters"},
		{"long type", with(func(s *jobwirev1.JobSpec) { s.Type = strings.Repeat("a", 256) }), "job.type: must be 1..255 characters"},
		{"type alphabet", with(func(s *jobwirev1.JobSpec) { s.Type = "send email" }), "job.type: may hold only"},
		{"queue alphabet", with(func(s *jobwirev1.JobSpec) { s.Queue = "mail/urgent" }), "job.queue: may hold only"},
		{"payload too big", with(func(s *jobwirev1.JobSpec) { s.Payload = bytes.Repeat([]byte("x"), 1<<20+1) }), "job.payload: is 1048577 bytes"},
		{"priority high", with(func(s *jobwirev1.JobSpec) { s.Priority = 1001 }), "job.priority: must be -1000..1000"},
		{"priority low", with(func(s *jobwirev1.JobSpec) { s.Priority = -1001 }), "job.priority: must be -1000..1000"},
		{"negative delay", with(func(s *jobwirev1.JobSpec) {
			s.Schedule = &jobwirev1.JobSpec_Delay{Delay: durationpb.New(-time.Second)}
		}), "job.delay: must be 0.."},
		{"run_at too far", with(func(s *jobwirev1.JobSpec) {
			s.Schedule = &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(now.Add(400 * 24 * time.Hour))}
		}), "job.run_at: is more than"},
		{"run_at invalid", with(func(s *jobwirev1.JobSpec) {
			s.Schedule = &jobwirev1.JobSpec_RunAt{RunAt: &timestamppb.Timestamp{Nanos: -1}}
		}), "job.run_at: is not a valid time"},
		{"max attempts", with(func(s *jobwirev1.JobSpec) { s.MaxAttempts = -1 }), "job.max_attempts: must be 0"},
		{"idempotency key", with(func(s *jobwirev1.JobSpec) { s.IdempotencyKey = strings.Repeat("k", 256) }), "job.idempotency_key: must be at most 255"},
		{"attempt timeout", with(func(s *jobwirev1.JobSpec) { s.AttemptTimeout = durationpb.New(time.Millisecond) }), "job.attempt_timeout: must be 1s.."},
		{"metadata key alphabet", with(func(s *jobwirev1.JobSpec) { s.Metadata = map[string]string{"my key": "v"} }), `job.metadata key "my key": may hold only`},
		{"metadata key too long", with(func(s *jobwirev1.JobSpec) { s.Metadata = map[string]string{strings.Repeat("k", 129): "v"} }), "job.metadata: key"},
		{"metadata value too long", with(func(s *jobwirev1.JobSpec) { s.Metadata = map[string]string{"note": strings.Repeat("v", 4097)} }), "job.metadata[note]: is 4097 bytes, more than 4096"},
		{"metadata too many keys", with(func(s *jobwirev1.JobSpec) {
			s.Metadata = map[string]string{}
			for i := range 65 {
				s.Metadata[fmt.Sprintf("k%d", i)] = "v"
			}
		}), "job.metadata: has 65 keys, more than 64"},
		{"metadata too big in all", with(func(s *jobwirev1.JobSpec) {
			s.Metadata = map[string]string{}
			for i := range 5 {
				s.Metadata[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 4000)
			}
		}), "job.metadata: is 20010 bytes in all, more than 16384"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: tt.spec})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("got %v, want INVALID_ARGUMENT containing %q", err, tt.want)
			}
		})
	}

	others := []struct {
		name string
		call func() error
		want string
	}{
		{"empty batch", func() error {
			_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{})
			return err
		}, "jobs: must hold 1..10000 jobs"},
		{"bad job in batch", func() error {
			_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{ok(), {Type: "a b"}}})
			return err
		}, "jobs[1].type"},
		{"get id", func() error {
			_, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{})
			return err
		}, "id: must be a positive job id"},
		{"cancel id", func() error {
			_, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: -4})
			return err
		}, "id: must be a positive job id"},
	}
	for _, tt := range others {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("got %v, want INVALID_ARGUMENT containing %q", err, tt.want)
			}
		})
	}
}

func TestBadHelloIsInvalidArgument(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	tests := []struct {
		name  string
		first *jobwirev1.ConnectRequest
		want  string
	}{
		{"not hello first", &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}}, "hello: the first message"},
		{"no worker id", hello(&jobwirev1.Hello{JobTypes: []string{"t"}, Capacity: 1}), "hello.worker_id"},
		{"no types", hello(&jobwirev1.Hello{WorkerId: "w", Capacity: 1}), "hello.job_types: must name at least one"},
		{"bad type", hello(&jobwirev1.Hello{WorkerId: "w", JobTypes: []string{"ok", "no way"}, Capacity: 1}), "hello.job_types[1]"},
		{"bad queue", hello(&jobwirev1.Hello{WorkerId: "w", JobTypes: []string{"t"}, Queues: []string{""}, Capacity: 1}), "hello.queues[0]"},
		{"zero capacity", hello(&jobwirev1.Hello{WorkerId: "w", JobTypes: []string{"t"}}), "hello.capacity: must be 1..10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := b.Workers.Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(tt.first); err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("got %v, want INVALID_ARGUMENT containing %q", err, tt.want)
			}
		})
	}
}

func hello(h *jobwirev1.Hello) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: h}}
}
