package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// wait is how long a test waits for a signal that must come; it never passes when all is well.
const wait = 10 * time.Second

func newFake() *clock.Fake { return clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) }

func startPeriodic(t *testing.T, clk clock.Clock, run func()) *Periodic {
	t.Helper()
	p := NewPeriodic(clk, time.Second, run)
	p.Ran.Init()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		<-p.Stopped()
	})
	return p
}

func TestPeriodicRunsEveryIntervalOnceTheLastRunReturned(t *testing.T) {
	t.Parallel()
	clk := newFake()
	var runs atomic.Int32
	p := startPeriodic(t, clk, func() { runs.Add(1) })
	select {
	case <-p.Started():
	default:
		t.Fatal("Started is not closed after Start")
	}
	clk.Advance(999 * time.Millisecond)
	if p.Ran.Sent() {
		t.Fatal("ran before its interval passed")
	}
	for i := 1; i <= 3; i++ {
		clk.Advance(time.Millisecond)
		if _, ok := p.Ran.Wait(wait); !ok {
			t.Fatalf("run %d did not come", i)
		}
		clk.Advance(999 * time.Millisecond) // the next run is armed a whole interval after this one
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
}

func TestPeriodicStopsArmingAndWaitsForTheRunUnderWay(t *testing.T) {
	t.Parallel()
	clk := newFake()
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	p := startPeriodic(t, clk, func() {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	clk.Advance(time.Second)
	<-entered
	p.Stop()
	select {
	case <-p.Stopped():
		t.Fatal("Stopped closed while a run was under way")
	default:
	}
	close(release)
	select {
	case <-p.Stopped():
	case <-time.After(wait):
		t.Fatal("Stopped not closed once the run returned")
	}
	clk.Advance(time.Hour)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1: a run ended by a stop armed another", n)
	}
}

func TestBaseStopsOnceAndNeverStartsAgain(t *testing.T) {
	t.Parallel()
	var b Base
	b.Stop() // before Start: stopped at once
	select {
	case <-b.Stopped():
	default:
		t.Fatal("a service stopped before it started is not Stopped")
	}
	if err := b.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Stop: %v, want ErrStarted", err)
	}
	if b.Do(func() { t.Fatal("work ran on a stopped service") }) {
		t.Fatal("Do reported work done on a stopped service")
	}
	b.Stop() // a second Stop is harmless

	var c Base
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	stops := 0
	c.OnStop(func() { stops++ })
	c.Stop()
	c.Stop()
	if stops != 1 {
		t.Fatalf("OnStop ran %d times, want once", stops)
	}
	c.OnStop(func() { stops++ }) // registered once stopping: runs at once
	if stops != 2 {
		t.Fatal("OnStop registered after the stop did not run")
	}
}

func TestAlarmKeepsOneTimerForTheLatestMoment(t *testing.T) {
	t.Parallel()
	clk := newFake()
	fired := make(chan struct{}, 10)
	a := NewAlarm(clk, func() { fired <- struct{}{} })
	t0 := clk.Now()
	a.Set(t0.Add(time.Second), true)
	if _, ok := a.Armed(); ok {
		t.Fatal("an alarm not started was armed")
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Set(t0.Add(2*time.Second), true)
	a.Set(t0.Add(time.Second), true) // moved earlier: replaces
	if at, ok := a.Armed(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("armed %v for %v, want armed for %v", ok, at, t0.Add(time.Second))
	}
	clk.Advance(time.Second)
	select {
	case <-fired:
	case <-time.After(wait):
		t.Fatal("the alarm did not fire")
	}
	if _, ok := a.Armed(); ok {
		t.Fatal("a fired alarm still counts as armed")
	}
	a.Set(t0.Add(5*time.Second), true)
	a.Set(time.Time{}, false) // cleared
	a.Stop()
	a.Set(t0.Add(6*time.Second), true) // stopped: arms nothing
	clk.Advance(time.Hour)
	<-a.Stopped()
	select {
	case <-fired:
		t.Fatal("a cleared or stopped alarm fired")
	default:
	}
}

func TestAlarmSetEarlierKeepsTheEarliestMoment(t *testing.T) {
	t.Parallel()
	clk := newFake()
	a := NewAlarm(clk, func() {})
	t0 := clk.Now()
	a.SetEarlier(t0.Add(time.Second))
	if _, ok := a.Armed(); ok {
		t.Fatal("an alarm not started was armed")
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	for _, c := range []struct {
		set, want time.Duration
	}{
		{3 * time.Second, 3 * time.Second}, // unarmed: arms
		{5 * time.Second, 3 * time.Second}, // later: kept
		{3 * time.Second, 3 * time.Second}, // the same: kept
		{2 * time.Second, 2 * time.Second}, // earlier: moved
	} {
		a.SetEarlier(t0.Add(c.set))
		if at, ok := a.Armed(); !ok || !at.Equal(t0.Add(c.want)) {
			t.Fatalf("after SetEarlier(+%s): armed %v for %v, want armed for +%s", c.set, ok, at, c.want)
		}
	}
}

// An alarm armed while the clock moves fires once the clock has passed its moment. The broker
// arms alarms while another goroutine advances a test's clock; an alarm once measured its delay
// from a reading the advance had made stale, and so waited for an advance that never came.
func TestAlarmArmedWhileTheClockMovesFires(t *testing.T) {
	t.Parallel()
	clk := &movingClock{Fake: newFake(), step: 2 * time.Second}
	fired := make(chan struct{}, 1)
	a := NewAlarm(clk, func() { fired <- struct{}{} })
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	a.SetEarlier(clk.Fake.Now().Add(time.Millisecond))
	clk.move() // if arming read no time, the clock moves now
	select {
	case <-fired:
	case <-time.After(wait):
		t.Fatalf("an alarm for a moment the clock passed as it was armed did not fire (now %v)", clk.Fake.Now())
	}
}

// movingClock is a fake clock that moves on by step once: right after it is first read, as if
// another goroutine advanced it then, or when move is called.
type movingClock struct {
	*clock.Fake
	step  time.Duration
	moved sync.Once
}

func (c *movingClock) Now() time.Time {
	now := c.Fake.Now()
	c.move()
	return now
}

func (c *movingClock) move() { c.moved.Do(func() { c.Fake.Advance(c.step) }) }
