package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// startScheduler starts a scheduler on a fake clock whose runs answer wake (and err), and
// count in runs.
func startScheduler(t *testing.T, leader bool, wake time.Time, err error, runs *atomic.Int32) (*scheduler, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	s := newScheduler(schedulerConfig{clk: clk, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		leader: func() bool { return leader },
		fire: func(time.Time) (int, time.Time, error) {
			runs.Add(1)
			return 1, wake, err
		}}, func() float64 { return 0.5 })
	s.Ran.Init()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		<-s.Stopped()
	})
	return s, clk
}

// A run's answer never moves the alarm later than a time another change asked for meanwhile:
// a schedule added while the run read the list fires at its own time.
func TestSchedulerAlarmOnlyMovesEarlier(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s, _ := startScheduler(t, true, t0.Add(time.Hour), nil, &runs)
	s.wake(t0.Add(time.Minute)) // the added schedule
	s.runNow()
	if at, ok := s.alarm.Armed(); !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("alarm armed for %v (%v), want the added schedule's time %v", at, ok, t0.Add(time.Minute))
	}
	s.wake(t0.Add(2 * time.Hour))
	if at, _ := s.alarm.Armed(); !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a later wake moved the alarm to %v", at)
	}
}

// The alarm fires the run at its time; a broker that does not lead runs nothing; a failed run
// is tried again a second later.
func TestSchedulerRunsAtTheAlarmOnTheLeaderAndRetries(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var followerRuns atomic.Int32
	f, _ := startScheduler(t, false, time.Time{}, nil, &followerRuns)
	f.runNow()
	if n := followerRuns.Load(); n != 0 {
		t.Fatalf("a follower ran the schedules %d times, want 0", n)
	}

	var runs atomic.Int32
	s, clk := startScheduler(t, true, time.Time{}, errors.New("database gone"), &runs)
	s.wake(t0.Add(time.Minute))
	clk.Advance(time.Minute)
	if _, ok := s.Ran.Wait(10 * time.Second); !ok || runs.Load() != 1 {
		t.Fatalf("runs %d at the alarm, want 1", runs.Load())
	}
	if at, ok := s.alarm.Armed(); !ok || !at.Equal(t0.Add(time.Minute+scheduleRetry)) {
		t.Fatalf("after a failed run the alarm is %v (%v), want a retry %s later", at, ok, scheduleRetry)
	}
}
