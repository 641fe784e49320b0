// Package reach tells whether a broker reaches its database: whether the database answered
// within a bound while something waited on it. It learns only from the calls the broker makes
// anyway (its writes, a cluster's heartbeat), so it costs the database nothing, and it reads
// time from an injected clock, so its decisions can be tested step by step.
//
// The database is silent from the later of the start of a call still waiting on it and the
// last answer; a call that failed without an answer keeps that silence going after it ended.
// Once it has been silent for the bound, the tracker is down; the next answer brings it up.
// A call that is merely slow while other calls are answered (a large batch, a lock wait) keeps
// it up: the database is there, only busy.
package reach

import (
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// Tracker follows the calls to one database. It is safe for concurrent use.
type Tracker struct {
	clk   clock.Clock
	bound time.Duration

	mu      sync.Mutex
	lastOK  time.Time            // when the database last answered
	failed  time.Time            // start of the silence a failure since lastOK showed; zero: none
	pending map[uint64]time.Time // calls waiting on it, by id, with their start
	nextID  uint64
	down    bool
	since   time.Time     // start of the silence that made it down
	lost    chan struct{} // closed while down
	timer   clock.Timer   // fires when the silence reaches the bound
	timerAt time.Time
	watch   []func(down bool)
	changes []bool // transitions not yet told to watch, in order
	telling bool   // a goroutine is telling watch of changes
}

// New returns a tracker that is down once the database has been silent for bound, reading
// time from clk. It starts up.
func New(clk clock.Clock, bound time.Duration) *Tracker {
	return &Tracker{clk: clk, bound: bound, lastOK: clk.Now(), pending: make(map[uint64]time.Time),
		lost: make(chan struct{})}
}

// Bound is how long the database may be silent before the tracker is down.
func (t *Tracker) Bound() time.Duration { return t.bound }

// Call is one call waiting on the database, from Begin to End.
type Call struct {
	t  *Tracker
	id uint64
}

// Begin notes that a call now waits on the database.
func (t *Tracker) Begin() Call {
	t.mu.Lock()
	t.nextID++
	id := t.nextID
	t.pending[id] = t.clk.Now()
	t.checkLocked()
	t.mu.Unlock()
	t.tell()
	return Call{t: t, id: id}
}

// Outcome is what a call learnt of the database.
type Outcome int

const (
	// Answered: the database answered, with success or with an error of its own (a
	// constraint, a conflict); it is reachable.
	Answered Outcome = iota + 1
	// Unreached: the call failed without an answer (the connection failed, a statement timed
	// out, the retries of a busy database ran out).
	Unreached
	// Abandoned: the caller stopped waiting; the call says nothing of the database.
	Abandoned
)

// End notes how the call ended. It may be called once.
func (c Call) End(o Outcome) {
	t := c.t
	t.mu.Lock()
	began := t.pending[c.id]
	delete(t.pending, c.id)
	switch o {
	case Answered:
		t.lastOK, t.failed = t.clk.Now(), time.Time{}
	case Unreached:
		// Silent since the call began, or since the last answer if that came later.
		if began.Before(t.lastOK) {
			began = t.lastOK
		}
		if t.failed.IsZero() || began.Before(t.failed) {
			t.failed = began
		}
	}
	t.checkLocked()
	t.mu.Unlock()
	t.tell()
}

// Down reports whether the database has been silent for the bound, and since when.
func (t *Tracker) Down() (since time.Time, down bool) {
	t.mu.Lock()
	t.checkLocked() // the timer may not have run yet
	since, down = t.since, t.down
	t.mu.Unlock()
	t.tell()
	return since, down
}

// Lost returns a channel that is closed while the tracker is down: a caller waiting on the
// database selects on it to stop waiting once the database is silent for the bound. Ask again
// after each wait: the next silence closes another channel.
func (t *Tracker) Lost() <-chan struct{} {
	t.mu.Lock()
	t.checkLocked()
	lost := t.lost
	t.mu.Unlock()
	t.tell()
	return lost
}

// Watch calls fn with true each time the tracker goes down and with false each time it comes
// back, in order, one call at a time, on a goroutine of the tracker's callers or its clock. fn
// may ask the tracker (Down); it may run some time after the change, when the tracker has
// changed again.
func (t *Tracker) Watch(fn func(down bool)) {
	t.mu.Lock()
	t.watch = append(t.watch, fn)
	t.mu.Unlock()
}

// silenceLocked is when the current silence began; false when nothing waits and nothing failed.
func (t *Tracker) silenceLocked() (time.Time, bool) {
	var s time.Time
	ok := false
	for _, start := range t.pending {
		if start.Before(t.lastOK) {
			start = t.lastOK
		}
		if !ok || start.Before(s) {
			s, ok = start, true
		}
	}
	if !t.failed.IsZero() && (!ok || t.failed.Before(s)) {
		s, ok = t.failed, true
	}
	return s, ok
}

// checkLocked moves the tracker down or up as the silence says, and arms the timer for the
// moment the current silence reaches the bound.
func (t *Tracker) checkLocked() {
	s, silent := t.silenceLocked()
	now := t.clk.Now()
	switch {
	case silent && !now.Before(s.Add(t.bound)):
		if !t.down {
			t.down, t.since = true, s
			close(t.lost)
			t.changes = append(t.changes, true)
		}
		return
	case t.down:
		t.down, t.since = false, time.Time{}
		t.lost = make(chan struct{})
		t.changes = append(t.changes, false)
	}
	if !silent {
		return
	}
	at := s.Add(t.bound)
	if t.timer != nil && !t.timerAt.After(at) {
		return // fires earlier, and looks again then
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timerAt = at
	t.timer = t.clk.AtFunc(at, t.fire)
}

// fire looks at the silence once it may have reached the bound.
func (t *Tracker) fire() {
	t.mu.Lock()
	t.timer = nil
	t.checkLocked()
	t.mu.Unlock()
	t.tell()
}

// tell calls the watchers with the changes not yet told. One caller at a time tells them, so
// they hear every change in order.
func (t *Tracker) tell() {
	t.mu.Lock()
	if t.telling {
		t.mu.Unlock()
		return
	}
	t.telling = true
	for len(t.changes) > 0 {
		down := t.changes[0]
		t.changes = t.changes[1:]
		watch := t.watch
		t.mu.Unlock()
		for _, fn := range watch {
			fn(down)
		}
		t.mu.Lock()
	}
	t.telling = false
	t.mu.Unlock()
}
