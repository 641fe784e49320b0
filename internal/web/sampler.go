package web

import (
	"context"
	"sync"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// sampler reads the job totals at a steady pace, so the overview can draw the last minutes of
// throughput as soon as it opens. One sampler serves every open page: a page never causes a
// storage read of its own for the graph. It starts with the first page that asks and runs
// until the listener's context ends.
type sampler struct {
	ctx   context.Context
	now   func() time.Time
	every time.Duration
	read  func(context.Context) (*jobwirev1.GetStatsResponse, error)

	start   sync.Once
	mu      sync.Mutex
	samples []sample
}

// DefaultSampleEvery is how often the throughput graph's totals are read.
const DefaultSampleEvery = 2 * time.Second

func newSampler(ctx context.Context, now func() time.Time, every time.Duration, read func(context.Context) (*jobwirev1.GetStatsResponse, error)) *sampler {
	if ctx == nil {
		ctx = context.Background()
	}
	if every <= 0 {
		every = DefaultSampleEvery
	}
	return &sampler{ctx: ctx, now: now, every: every, read: read}
}

// snapshot returns the samples so far, oldest first.
func (s *sampler) snapshot() []sample {
	s.start.Do(func() {
		s.take()
		go s.run()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

func (s *sampler) run() {
	// The pace of a display, not a scheduling decision: the wall clock is right here.
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.take()
		}
	}
}

func (s *sampler) take() {
	ctx, cancel := context.WithTimeout(s.ctx, s.every)
	defer cancel()
	st, err := s.read(ctx)
	if err != nil {
		return // a gap in the graph; the next reading fills in
	}
	smp := sample{At: s.now()}
	for _, c := range st.GetCounts() {
		smp.Enqueued += c.GetCount()
		switch c.GetState() {
		case jobwirev1.JobState_JOB_STATE_SUCCEEDED:
			smp.Succeeded += c.GetCount()
		case jobwirev1.JobState_JOB_STATE_DEAD:
			smp.Dead += c.GetCount()
		}
	}
	for _, r := range st.GetRecent() {
		if r.GetWindow().AsDuration() == time.Minute {
			smp.FailedLastMinute = r.GetFailed()
		}
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	if len(s.samples) > sampleKeep {
		s.samples = s.samples[len(s.samples)-sampleKeep:]
	}
	s.mu.Unlock()
}
