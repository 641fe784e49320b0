package reach_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store/reach"
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// recorder keeps what a tracker told its watcher.
type recorder struct {
	mu      sync.Mutex
	got     []bool
	changed chan struct{} // a token after each call of watch
}

func (r *recorder) watch(down bool) {
	r.mu.Lock()
	r.got = append(r.got, down)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) told() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// waitTold waits until the watcher was told want. The tracker tells its watchers from the
// goroutine that saw a change, which may be the fake clock's timer still telling when the test
// goes on, so what was told shows up a moment later.
func (r *recorder) waitTold(t *testing.T, want []bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got := r.told()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("watcher told %v, want %v", got, want)
		}
	}
}

func newTracker(t *testing.T) (*reach.Tracker, *clock.Fake, *recorder) {
	t.Helper()
	clk := clock.NewFake(start)
	tr := reach.New(clk, time.Second)
	r := recorder{changed: make(chan struct{}, 1)}
	tr.Watch(r.watch)
	return tr, clk, &r
}

func isDown(tr *reach.Tracker) bool {
	_, down := tr.Down()
	return down
}

func lostClosed(tr *reach.Tracker) bool {
	select {
	case <-tr.Lost():
		return true
	default:
		return false
	}
}

func TestCallWaitingPastTheBoundIsDown(t *testing.T) {
	tr, clk, r := newTracker(t)
	c := tr.Begin()
	clk.Advance(999 * time.Millisecond)
	if isDown(tr) || lostClosed(tr) {
		t.Fatal("down before the bound")
	}
	clk.Advance(time.Millisecond)
	since, down := tr.Down()
	if !down || !since.Equal(start) || !lostClosed(tr) {
		t.Fatalf("Down() = %v, %v; Lost closed %v: want down since %v", since, down, lostClosed(tr), start)
	}
	c.End(reach.Answered)
	if isDown(tr) || lostClosed(tr) {
		t.Fatal("still down after an answer")
	}
	r.waitTold(t, []bool{true, false})
}

func TestAnswersElsewhereKeepASlowCallUp(t *testing.T) {
	tr, clk, r := newTracker(t)
	slow := tr.Begin()
	for range 5 {
		clk.Advance(600 * time.Millisecond)
		tr.Begin().End(reach.Answered)
	}
	if isDown(tr) {
		t.Fatal("down while other calls are answered")
	}
	// Silent from the last answer on: the slow call still waits.
	clk.Advance(time.Second)
	if !isDown(tr) {
		t.Fatal("not down a bound after the last answer with a call waiting")
	}
	slow.End(reach.Unreached)
	if !isDown(tr) {
		t.Fatal("up again after a failure")
	}
	r.waitTold(t, []bool{true})
}

func TestFailuresWithNothingWaitingAreDown(t *testing.T) {
	tr, clk, _ := newTracker(t)
	tr.Begin().End(reach.Unreached)
	clk.Advance(500 * time.Millisecond)
	tr.Begin().End(reach.Unreached) // the silence runs from the first failure
	clk.Advance(500 * time.Millisecond)
	if !isDown(tr) {
		t.Fatal("not down a bound after the first failure")
	}
	tr.Begin().End(reach.Answered)
	if isDown(tr) {
		t.Fatal("still down after an answer")
	}
}

func TestIdleIsUp(t *testing.T) {
	tr, clk, _ := newTracker(t)
	tr.Begin().End(reach.Answered)
	clk.Advance(time.Hour)
	if isDown(tr) {
		t.Fatal("down with nothing waiting")
	}
	c := tr.Begin()
	c.End(reach.Abandoned)
	clk.Advance(time.Hour)
	if isDown(tr) {
		t.Fatal("an abandoned call made it down")
	}
}
