package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/triage"
)

// The writer defers only the results that say they may wait.
var _ commit.Deferrer = (*resultOp)(nil)

// A success may wait for a producer's next enqueue (commit.Deferrer) only when nothing but its
// own answer waits on its commit.
func TestResultMayWaitOnlyWhenNothingWaitsOnIt(t *testing.T) {
	t.Parallel()
	b, err := New(Options{Store: openStore(t), Commit: testCommit, Config: DefaultConfig(),
		Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Not started: no writer runs a round that would change what the cases set.
	s, _, err := b.Open(context.Background(), Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		readyMaybe bool // a job may be waiting for the slot the result frees
		watched    bool // a client watches a job
		d          triage.Decision
		batch      int64
		want       bool
	}{
		{name: "nothing waits", d: triage.Success(), want: true},
		{name: "a job may wait for its slot", readyMaybe: true, d: triage.Success()},
		{name: "a job is watched", watched: true, d: triage.Success()},
		{name: "ends a batch's job", d: triage.Success(), batch: 7},
		{name: "a failure", d: triage.Decision{Verdict: triage.Dead, Reason: job.DeadFatal}},
	}
	for _, tt := range tests {
		b.writing.readyMaybe.Store(tt.readyMaybe)
		if tt.watched {
			b.svc.watches.watched.Add(1)
		}
		o := &resultOp{s: s, d: tt.d, params: &store.JobFinishParams{State: job.StateSucceeded, Batch: tt.batch}}
		if got := o.MayWait(); got != tt.want {
			t.Errorf("%s: MayWait() = %v, want %v", tt.name, got, tt.want)
		}
		if tt.watched {
			b.svc.watches.watched.Add(-1)
		}
	}
}
