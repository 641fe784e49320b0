package service

import (
	"context"
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// Periodic runs a function every interval of a clock: the next run is armed when the last one
// returns, so runs never overlap and a slow run delays the next rather than piling up. The
// first run comes an interval after Start.
type Periodic struct {
	Base
	clk      clock.Clock
	interval time.Duration
	run      func()

	mu    sync.Mutex
	timer clock.Timer

	// Ran is sent after each run (tests: Ran.Init before Start).
	Ran Signal[struct{}]
}

// NewPeriodic makes a service that calls run every interval of clk.
func NewPeriodic(clk clock.Clock, interval time.Duration, run func()) *Periodic {
	p := &Periodic{clk: clk, interval: interval, run: run}
	p.OnStop(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.timer != nil {
			p.timer.Stop()
		}
	})
	return p
}

// Start arms the first run.
func (p *Periodic) Start(ctx context.Context) error {
	if err := p.Base.Start(ctx); err != nil {
		return err
	}
	p.arm()
	return nil
}

// arm sets the timer for the next run unless the service is stopping. The check and the arming
// are one step under p.mu, which Stop's timer stop also takes: a run that ends as Stop begins
// either arms before Stop stops the timer, or sees the service stopping and arms nothing.
func (p *Periodic) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Running() {
		p.timer = p.clk.AfterFunc(p.interval, p.tick)
	}
}

// tick runs the function and arms the next run before it says so (Ran): a test that moves
// the clock on once it hears of a run then moves it past the next.
func (p *Periodic) tick() {
	p.Do(func() {
		p.run()
		p.arm()
		p.Ran.Send(struct{}{})
	})
}

// Alarm calls a function at a moment of a clock, which its owner moves (Set): one timer is
// armed, for the latest moment set. It does nothing of itself until set, and is a Service so
// that the broker stops it with the others.
type Alarm struct {
	Base
	clk clock.Clock
	fn  func()

	mu    sync.Mutex
	timer clock.Timer
	at    time.Time
	gen   uint64 // counts the timers armed, so that a fired timer knows whether it is current
}

// NewAlarm makes an alarm that calls fn at the moment last set.
func NewAlarm(clk clock.Clock, fn func()) *Alarm {
	a := &Alarm{clk: clk, fn: fn}
	a.OnStop(func() { a.Clear() })
	return a
}

// Set arms the alarm for at, replacing the moment set before; ok false clears it. Setting the
// moment already armed keeps its timer.
func (a *Alarm) Set(at time.Time, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ok && a.timer != nil && at.Equal(a.at) {
		return
	}
	a.clearLocked()
	if ok {
		a.armLocked(at)
	}
}

// SetEarlier arms the alarm for at unless it is armed for at or earlier already: whoever
// needs a call by some moment sets it, and the earliest moment wins. The check and the change
// are one step, so two callers cannot leave the later of their moments armed.
func (a *Alarm) SetEarlier(at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil && !at.Before(a.at) {
		return
	}
	a.clearLocked()
	a.armLocked(at)
}

func (a *Alarm) armLocked(at time.Time) {
	if !a.Running() {
		return
	}
	a.at = at
	a.gen++
	gen := a.gen
	a.timer = a.clk.AtFunc(at, func() { a.fire(gen) })
}

// Clear disarms the alarm.
func (a *Alarm) Clear() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clearLocked()
}

func (a *Alarm) clearLocked() {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timer, a.at = nil, time.Time{}
}

// Armed reports the moment the alarm is armed for, if it is.
func (a *Alarm) Armed() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at, a.timer != nil
}

// fire runs fn for the timer of generation gen: a timer replaced meanwhile that fired anyway
// still calls fn (a call too many is harmless for a wake-up), and a current one is spent.
func (a *Alarm) fire(gen uint64) {
	a.mu.Lock()
	if a.gen == gen {
		a.timer, a.at = nil, time.Time{}
	}
	a.mu.Unlock()
	a.Do(a.fn)
}
