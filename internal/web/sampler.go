package web

import (
	"context"
	"sync"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// sampler reads the job totals at a steady pace from the moment the listener starts, so the
// overview draws the last minutes of throughput as soon as it opens, even the first time. One
// sampler serves every open page: a page never causes a storage read of its own for the graph.
// It runs until the listener's context ends and keeps at most sampleKeep readings.
type sampler struct {
	ctx   context.Context
	clk   clock.Clock
	every time.Duration
	read  func(context.Context) (*jobwirev1.GetStatsResponse, error)

	reading sync.Mutex // held while a reading is in flight
	// restAt is when the sampler may read again after a slow reading (readShare); guarded by
	// reading.
	restAt  time.Time
	mu      sync.Mutex
	samples []sample // oldest first
}

// readShare bounds the broker's time the sampler spends reading: after a reading that took d,
// the next comes no sooner than readShare times d after it began. The totals are counted over
// the unfinished jobs, so a reading's cost grows with the backlog (a million jobs waiting took
// seconds on SQLite); read every 2 s regardless, the graph alone would take a CPU from the
// broker. With a small backlog a reading takes milliseconds and the pace stays every.
const readShare = 20

// DefaultSampleEvery is how often the throughput graph's totals are read.
const DefaultSampleEvery = 2 * time.Second

// rateWindow is the trailing window every line of the graph is averaged over: the broker
// counts finished attempts over the last minute, and enqueues are averaged over the same span.
const rateWindow = time.Minute

func newSampler(ctx context.Context, clk clock.Clock, every time.Duration, read func(context.Context) (*jobwirev1.GetStatsResponse, error)) *sampler {
	if ctx == nil {
		ctx = context.Background()
	}
	if every <= 0 {
		every = DefaultSampleEvery
	}
	return &sampler{ctx: ctx, clk: clk, every: every, read: read}
}

// start takes the first reading now and one every s.every after it, until s.ctx ends.
func (s *sampler) start() {
	s.clk.AfterFunc(0, s.tick)
}

// tick arms the next reading before taking this one, so the pace does not drift by the time a
// reading takes; a reading still in flight when the next is due makes that one skip.
func (s *sampler) tick() {
	if s.ctx.Err() != nil {
		return
	}
	s.clk.AfterFunc(s.every, s.tick)
	if !s.reading.TryLock() {
		return
	}
	defer s.reading.Unlock()
	began := s.clk.Now()
	if began.Before(s.restAt) {
		return
	}
	s.take()
	s.restAt = began.Add(readShare * s.clk.Now().Sub(began))
}

// snapshot returns the samples so far, oldest first.
func (s *sampler) snapshot() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

func (s *sampler) take() {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	st, err := s.read(ctx)
	if err != nil {
		return // a gap in the graph; the next reading fills in
	}
	smp := sample{At: s.clk.Now()}
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
		if r.GetWindow().AsDuration() == rateWindow {
			smp.SucceededLastMinute = r.GetSucceeded()
			smp.FailedLastMinute = r.GetFailed()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	smp.rates(s.samples)
	s.samples = append(s.samples, smp)
	if len(s.samples) > sampleKeep {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-sampleKeep:]...)
	}
}

// rates sets smp's per-second rates, each an average over the trailing rateWindow: succeeded
// and failed attempts from the broker's own count of that window, and enqueues from the growth
// of the total since the oldest earlier reading inside it. Until the sampler has a window's
// worth of readings, enqueues are averaged over the span it has.
func (smp *sample) rates(before []sample) {
	sec := rateWindow.Seconds()
	smp.SucceededRate = float64(smp.SucceededLastMinute) / sec
	smp.FailedRate = float64(smp.FailedLastMinute) / sec
	from := -1
	for i := len(before) - 1; i >= 0 && smp.At.Sub(before[i].At) <= rateWindow; i-- {
		from = i
	}
	if from < 0 {
		return
	}
	if span := smp.At.Sub(before[from].At).Seconds(); span > 0 {
		smp.EnqueuedRate = max(0, float64(smp.Enqueued-before[from].Enqueued)/span)
	}
}
