// Package service gives the broker's background concerns (the sweep of expired leases, the
// promotion of scheduled jobs, retention, breaker persistence, the cluster's poll and
// membership) one shape: each is a Service the broker starts in order at Start and stops in
// order at Shutdown, with signals a test waits on instead of sleeping.
//
// Stopping is two steps because of what a stop may wait for. Stop returns at once: from then
// on the service starts no new work. Work already under way may be waiting on the broker's
// writer, which stops later in a shutdown; Stopped is closed once that work has returned. A
// broker stops every timed service as its shutdown begins and waits on Stopped at its end.
package service

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Service is a background concern with a uniform start and stop.
type Service interface {
	// Start begins the service's work in the background. ctx carries the broker's values and
	// ends when the broker has stopped.
	Start(ctx context.Context) error
	// Stop asks the service to start no more work; it returns at once and may be called more
	// than once, also before Start.
	Stop()
	// Stopped is closed once Stop was called and no work of the service is under way.
	Stopped() <-chan struct{}
}

// ErrStarted is returned by a second Start.
var ErrStarted = errors.New("service already started")

// state is where a service is in its life. Transitions: idle → running (Start), idle or
// running → stopping (Stop), stopping → stopped (the last work under way returned).
type state int

const (
	idle state = iota
	running
	stopping
	stopped
)

// Base keeps a service's state, the work it has under way and its started and stopped
// signals. A service embeds it, calls Base.Start first in a Start of its own, runs each
// piece of work through Do or Go, has what must end at a stop (a timer, a loop) ended by OnStop,
// and gets Stop, Stopped and Started.
type Base struct {
	mu        sync.Mutex
	state     state
	busy      int // pieces of work under way
	started   chan struct{}
	stoppedCh chan struct{}
	onStop    []func() // run once, by the Stop that moves the service to stopping
}

func (b *Base) init() {
	if b.started == nil {
		b.started, b.stoppedCh = make(chan struct{}), make(chan struct{})
	}
}

// Start moves the service from idle to running; a service with more to start calls it first.
// It fails with ErrStarted if the service was started (or stopped) before.
func (b *Base) Start(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if b.state != idle {
		return ErrStarted
	}
	b.state = running
	close(b.started)
	return nil
}

// enter begins a piece of work: false once the service is stopping, when the work must not
// be done.
func (b *Base) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != running {
		return false
	}
	b.busy++
	return true
}

// leave ends a piece of work begun by enter.
func (b *Base) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.busy--
	b.settleLocked()
}

// Running reports whether the service takes new work.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == running
}

// OnStop has fn run by the Stop that ends the service's intake of work (for a timer to stop,
// a context to cancel); fn runs without the service's lock. A service already stopping runs
// it at once.
func (b *Base) OnStop(fn func()) {
	b.mu.Lock()
	if b.state < stopping {
		b.onStop = append(b.onStop, fn)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	fn()
}

// Stop moves the service to stopping: no new work starts. It does not wait for work under way
// (see Stopped).
func (b *Base) Stop() {
	b.mu.Lock()
	b.init()
	if b.state >= stopping {
		b.mu.Unlock()
		return
	}
	b.state = stopping
	fns := b.onStop
	b.onStop = nil
	b.settleLocked()
	b.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (b *Base) settleLocked() {
	if b.state == stopping && b.busy == 0 {
		b.state = stopped
		close(b.stoppedCh)
	}
}

// Started is closed once the service has started.
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return b.started
}

// Stopped is closed once the service was stopped and no work of it is under way.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return b.stoppedCh
}

// Do runs fn as a piece of the service's work unless the service is stopping, and reports
// whether it ran: Stopped waits for it.
func (b *Base) Do(fn func()) bool {
	if !b.enter() {
		return false
	}
	defer b.leave()
	fn()
	return true
}

// Go runs fn on a goroutine of its own as a piece of the service's work unless the service is
// stopping, and reports whether it started it. Stopped waits for it.
func (b *Base) Go(fn func()) bool {
	if !b.enter() {
		return false
	}
	go func() {
		defer b.leave()
		fn()
	}()
	return true
}

// StopAll asks every service to stop, in order.
func StopAll(services ...Service) {
	for _, s := range services {
		s.Stop()
	}
}

// WaitStopped waits, in order, until every service has stopped.
func WaitStopped(services ...Service) {
	for _, s := range services {
		<-s.Stopped()
	}
}

// Signal is a test signal: a service whose signals a test initialised (Init) sends on it when
// something happened, and the test waits for that (Wait) rather than sleeping. Uninitialised,
// as outside tests, it costs a nil check.
type Signal[T any] struct{ ch chan T }

// Init makes the signal record what it is sent; call it before the service starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, 1000) }

// Send records v if the signal was initialised; it never blocks.
func (s *Signal[T]) Send(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next value sent, or false if none came within d.
func (s *Signal[T]) Wait(d time.Duration) (T, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// Sent reports whether a value was sent and not yet waited for, without waiting.
func (s *Signal[T]) Sent() bool { return len(s.ch) > 0 }
