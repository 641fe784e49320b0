package broker

import (
	"reflect"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/retry"
)

// Every default a job takes, and every clamp of when it runs, decided by one method.
func TestJobSpecWithDefaults(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := DefaultConfig()
	cfg.AttemptTimeout = 7 * time.Minute
	cfg.Retry.MaxAttempts = 4
	strict := retry.DefaultPolicy()
	strict.MaxAttempts = 2
	cfg.RetryByType = map[string]retry.Policy{"charge": strict}

	// want is the spec every case expects unless it changes it.
	want := func(change func(*JobSpec)) JobSpec {
		s := JobSpec{Type: "t", Queue: job.DefaultQueue, RunAt: now, MaxAttempts: 4, AttemptTimeout: 7 * time.Minute}
		if change != nil {
			change(&s)
		}
		return s
	}
	tests := []struct {
		name string
		in   JobSpec
		want JobSpec
	}{
		{"all defaults", JobSpec{Type: "t"}, want(nil)},
		{"queue given", JobSpec{Type: "t", Queue: "mail"}, want(func(s *JobSpec) { s.Queue = "mail" })},
		{"run-at in the future kept", JobSpec{Type: "t", RunAt: now.Add(time.Hour)},
			want(func(s *JobSpec) { s.RunAt = now.Add(time.Hour) })},
		{"run-at now kept", JobSpec{Type: "t", RunAt: now}, want(nil)},
		{"run-at in the past means now", JobSpec{Type: "t", RunAt: now.Add(-time.Hour)}, want(nil)},
		{"run-at at the epoch means now", JobSpec{Type: "t", RunAt: time.Unix(0, 0)}, want(nil)},
		{"delay from now", JobSpec{Type: "t", Delay: 90 * time.Second},
			want(func(s *JobSpec) { s.RunAt = now.Add(90 * time.Second) })},
		{"negative delay means now", JobSpec{Type: "t", Delay: -time.Second}, want(nil)},
		{"run-at wins over delay", JobSpec{Type: "t", RunAt: now.Add(time.Hour), Delay: time.Minute},
			want(func(s *JobSpec) { s.RunAt = now.Add(time.Hour) })},
		{"max attempts from the type's policy", JobSpec{Type: "charge"},
			want(func(s *JobSpec) { s.Type, s.MaxAttempts = "charge", 2 })},
		{"max attempts given", JobSpec{Type: "charge", MaxAttempts: 9},
			want(func(s *JobSpec) { s.Type, s.MaxAttempts = "charge", 9 })},
		{"attempt timeout given", JobSpec{Type: "t", AttemptTimeout: time.Second},
			want(func(s *JobSpec) { s.AttemptTimeout = time.Second })},
		{"the rest kept as given", JobSpec{Type: "t", Payload: []byte("p"), Priority: -3, IdempotencyKey: "k",
			Metadata: map[string]string{"a": "b"}}, want(func(s *JobSpec) {
			s.Payload, s.Priority, s.IdempotencyKey, s.Metadata = []byte("p"), -3, "k", map[string]string{"a": "b"}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in.withDefaults(cfg, now)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("withDefaults(%+v)\n got %+v\nwant %+v", tt.in, got, tt.want)
			}
			p := got.insertParams(now)
			if p.Queue != got.Queue || !p.RunAt.Equal(got.RunAt) || p.MaxAttempts != got.MaxAttempts ||
				p.AttemptTimeout != got.AttemptTimeout || !p.Now.Equal(now) {
				t.Errorf("insertParams(%+v) = %+v", got, p)
			}
		})
	}
}
