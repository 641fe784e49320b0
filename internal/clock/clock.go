// Package clock lets the broker read time through an interface so that tests can move it by hand.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is the broker's source of time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// AtFunc calls f in its own goroutine once the clock reads at or later. A deadline is
	// set with it rather than with AfterFunc(at.Sub(Now())): between that reading and the
	// timer's setting the clock may move, and the timer would fire that much late (a fake
	// clock advanced in between never fires it).
	AtFunc(at time.Time, f func()) Timer
}

// Timer can be stopped before it fires.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it stopped the call.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (Real) AtFunc(at time.Time, f func()) Timer { return time.AfterFunc(time.Until(at), f) }

// Fake is a clock that moves only when Advance or Set is called.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock standing at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atLocked(c.now.Add(d), f)
}

func (c *Fake) AtFunc(at time.Time, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atLocked(at, f)
}

// atLocked sets a timer for at, or calls f at once if the clock reads at already.
func (c *Fake) atLocked(at time.Time, f func()) Timer {
	t := &fakeTimer{c: c, at: at, f: f}
	if at.After(c.now) {
		c.timers = append(c.timers, t)
	} else {
		go f()
	}
	return t
}

// Advance moves the clock forward by d and fires every timer that is now due, in time order.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		go t.f()
	}
}

type fakeTimer struct {
	c  *Fake
	at time.Time
	f  func()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
