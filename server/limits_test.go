package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// Each limit takes what is exactly at it and refuses one more, with a message that names the
// field and the limit.
func TestLimitsHoldAtTheirBoundary(t *testing.T) {
	t.Parallel()
	limits := server.DefaultLimits()
	limits.MaxBatch = 3
	b := brokertest.New(t, brokertest.Options{Limits: limits})
	ctx := context.Background()
	batch := func(n int) error {
		jobs := make([]*jobwirev1.JobSpec, n)
		for i := range jobs {
			jobs[i] = spec("limits")
		}
		_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: jobs})
		return err
	}
	payload := func(n int) error {
		s := spec("limits")
		s.Payload = bytes.Repeat([]byte("x"), n)
		_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: s})
		return err
	}
	// The broker caps a hello at 1000 job types and 1000 queues.
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("t%d", i)
		}
		return out
	}
	hello := func(types, queues int) error {
		h := &jobwirev1.Hello{WorkerId: "w", Capacity: 1, JobTypes: names(types), Queues: names(queues)}
		w, err := b.ConnectOn(b.Workers, h)
		if err == nil {
			w.Kill()
		}
		return err
	}
	tests := []struct {
		name string
		call func() error
		want string // "" for accepted, else the INVALID_ARGUMENT message's start
	}{
		{"batch at the limit", func() error { return batch(3) }, ""},
		{"batch over the limit", func() error { return batch(4) }, "jobs: must hold 1..3 jobs, got 4"},
		{"payload at the limit", func() error { return payload(limits.MaxPayload) }, ""},
		{"payload over the limit", func() error { return payload(limits.MaxPayload + 1) }, "job.payload: is 1048577 bytes"},
		{"hello types at the limit", func() error { return hello(1000, 1) }, ""},
		{"hello types over the limit", func() error { return hello(1001, 1) }, "hello.job_types: names 1001 job types, more than the limit of 1000"},
		{"hello queues at the limit", func() error { return hello(1, 1000) }, ""},
		{"hello queues over the limit", func() error { return hello(1, 1001) }, "hello.queues: names 1001 queues, more than the limit of 1000"},
	}
	for _, tt := range tests {
		err := tt.call()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tt.name, err)
		case tt.want != "" && (status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tt.want)):
			t.Errorf("%s: %v, want INVALID_ARGUMENT %q", tt.name, err, tt.want)
		}
	}
}
