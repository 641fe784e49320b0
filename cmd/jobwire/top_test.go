package main

import (
	"context"
	"strings"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

func TestTopDrawsFramesWithRatesQueuesAndOpenBreakers(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	for range 3 {
		if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "report.build", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN}); err != nil {
		t.Fatal(err)
	}
	out := e2eOK(t, b, "top", "--count", "2", "--interval", "100ms")
	if n := strings.Count(out, "jobwire top: "); n != 2 {
		t.Fatalf("%d frames, want 2:\n%s", n, out)
	}
	first, second, _ := strings.Cut(strings.TrimPrefix(out, "jobwire top: "), "jobwire top: ")
	if !strings.Contains(first, "Throughput: enqueued -  succeeded -") {
		t.Errorf("the first frame has rates, but there is nothing to compare with:\n%s", first)
	}
	if !strings.Contains(second, "Throughput: enqueued 0.0/s  succeeded 0.0/s") {
		t.Errorf("the second frame has no rates:\n%s", second)
	}
	for _, want := range []string{"PENDING 3", "Queues:", "mail", "Breakers not closed:", "report.build", "OPEN"} {
		if !strings.Contains(second, want) {
			t.Errorf("frame lacks %q:\n%s", want, second)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("top cleared the screen of something that is not a terminal")
	}
}

func TestTopRejectsBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"top", "--interval", "1ms"}, "--interval must be at least 100ms, got 1ms"},
		{[]string{"top", "--count", "-1"}, "--count must be zero or more, got -1"},
		{[]string{"top", "extra"}, "extra"},
	}
	for _, tt := range tests {
		r := runCLI(t, nil, tt.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("jobwire %s: exit %d, stderr %q; want 2 and %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
}
