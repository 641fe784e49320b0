package web

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// fakeStats answers GetStats with totals a test sets.
type fakeStats struct {
	mu                         sync.Mutex
	total, succeeded, failedM1 int64
	reads                      int
}

func (f *fakeStats) read(context.Context) (*jobwirev1.GetStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return &jobwirev1.GetStatsResponse{
		Counts: []*jobwirev1.StateCount{
			{State: jobwirev1.JobState_JOB_STATE_PENDING, Count: f.total - f.succeeded},
			{State: jobwirev1.JobState_JOB_STATE_SUCCEEDED, Count: f.succeeded},
		},
		Recent: []*jobwirev1.RecentCounts{
			{Window: durationpb.New(time.Minute), Succeeded: f.succeeded, Failed: f.failedM1},
			{Window: durationpb.New(time.Hour), Succeeded: 999, Failed: 999},
		},
	}, nil
}

func (f *fakeStats) set(total, succeeded, failed int64) {
	f.mu.Lock()
	f.total, f.succeeded, f.failedM1 = total, succeeded, failed
	f.mu.Unlock()
}

func waitSamples(t *testing.T, s *sampler, n int) []sample {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := s.snapshot(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sampler has %d samples, want %d", len(s.snapshot()), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

// The sampler reads from the moment it starts, not from the first page that asks, paces itself
// by its clock, averages every line over the same trailing minute and keeps a bounded history.
func TestSamplerReadsFromStartWithEveryLineAveragedAlike(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := &fakeStats{}
	s := newSampler(t.Context(), clk, 2*time.Second, f.read)
	s.start()
	first := waitSamples(t, s, 1)
	if !first[0].At.Equal(clk.Now()) {
		t.Errorf("first sample at %v, want the start %v", first[0].At, clk.Now())
	}
	// 30 enqueued and 30 succeeded, 12 failed in the window, over 30 seconds.
	for i := 1; i <= 15; i++ {
		f.set(int64(2*i), int64(2*i), 12)
		clk.Advance(2 * time.Second)
		waitSamples(t, s, i+1)
	}
	last := s.snapshot()[15]
	if last.EnqueuedRate != 1 {
		t.Errorf("enqueued %v/s over the 30 seconds sampled, want 1", last.EnqueuedRate)
	}
	if last.SucceededRate != 30.0/60 || last.FailedRate != 12.0/60 {
		t.Errorf("succeeded %v/s, failed %v/s; want both over the minute: 0.5 and 0.2", last.SucceededRate, last.FailedRate)
	}
	// A minute later the enqueue rate is averaged over the last minute only.
	for i := 16; i <= 60; i++ {
		f.set(30+int64(i-15)*4, 30, 0)
		clk.Advance(2 * time.Second)
		waitSamples(t, s, i+1)
	}
	if got := s.snapshot()[60].EnqueuedRate; got != 2 {
		t.Errorf("enqueued %v/s over the trailing minute, want 2", got)
	}
	for i := 61; i < sampleKeep+10; i++ {
		clk.Advance(2 * time.Second)
		waitSamples(t, s, min(i+1, sampleKeep))
	}
	clk.Advance(2 * time.Second)
	f.mu.Lock()
	reads := f.reads
	f.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for got := s.snapshot(); !got[len(got)-1].At.Equal(clk.Now()); got = s.snapshot() {
		if time.Now().After(deadline) {
			t.Fatal("the last reading never came")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(s.snapshot()); got != sampleKeep || reads < sampleKeep {
		t.Errorf("%d samples kept after %d readings, want %d", got, reads, sampleKeep)
	}
}
