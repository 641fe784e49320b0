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

// advance moves the clock a reading on and waits until the sampler has taken that reading (the
// sampler arms its next reading before it takes one, so the next advance finds it armed).
func advance(t *testing.T, s *sampler, clk *clock.Fake) []sample {
	t.Helper()
	clk.Advance(s.every)
	return waitReading(t, s, clk.Now())
}

// waitReading waits until the sampler's newest reading is stamped at.
func waitReading(t *testing.T, s *sampler, at time.Time) []sample {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.snapshot()
		if len(got) > 0 && got[len(got)-1].At.Equal(at) {
			// The reading is done once its tick lets go: the next tick must not find it in
			// flight and skip.
			s.reading.Lock()
			s.reading.Unlock()
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reading at %v after 30s; %d samples", at, len(got))
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
	if first := waitReading(t, s, clk.Now()); len(first) != 1 {
		t.Fatalf("%d samples at the start, want 1", len(first))
	}
	// 30 enqueued and 30 succeeded, 12 failed in the window, over 30 seconds.
	for i := 1; i <= 15; i++ {
		f.set(int64(2*i), int64(2*i), 12)
		advance(t, s, clk)
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
		advance(t, s, clk)
	}
	if got := s.snapshot()[60].EnqueuedRate; got != 2 {
		t.Errorf("enqueued %v/s over the trailing minute, want 2", got)
	}
	for range sampleKeep {
		advance(t, s, clk)
	}
	if got := len(s.snapshot()); got != sampleKeep {
		t.Errorf("%d samples kept, want %d", got, sampleKeep)
	}
}

// tickClock is a fake clock that says when each function it fired has returned, so a test
// knows a tick is over even when it read nothing.
type tickClock struct {
	*clock.Fake
	ran chan struct{}
}

func (c *tickClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Fake.AfterFunc(d, func() {
		f()
		c.ran <- struct{}{}
	})
}

// A slow reading (a large backlog to count) spaces out the readings after it, so the graph
// never takes more than 1/readShare of the broker's time; once readings are quick again, so is
// the pace.
func TestSamplerSpacesOutSlowReadings(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &tickClock{Fake: clock.NewFake(start), ran: make(chan struct{}, 1)}
	f := &fakeStats{}
	took := time.Second // read and written by ticks only, which never overlap here
	read := func(ctx context.Context) (*jobwirev1.GetStatsResponse, error) {
		clk.Advance(took) // the reading takes this long on the sampler's clock
		return f.read(ctx)
	}
	s := newSampler(t.Context(), clk, 2*time.Second, read)
	reads := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.reads
	}
	s.start()
	<-clk.ran // the first reading, which took 1 s
	took = 0
	// Ticks every 2 s, at 3 s, 5 s ... 19 s: none may read before 20 s.
	for clk.Now().Before(start.Add(19 * time.Second)) {
		clk.Advance(s.every)
		<-clk.ran
	}
	if n := reads(); n != 1 {
		t.Fatalf("%d readings in the %v after one that took 1s, want 1", n, clk.Now().Sub(start))
	}
	// Readings that take no time come every 2 s again.
	for range 3 {
		clk.Advance(s.every)
		<-clk.ran
	}
	if n := reads(); n != 4 {
		t.Fatalf("%d readings by %v, want 4: quick readings keep the pace", n, clk.Now().Sub(start))
	}
}
