package clock

import (
	"testing"
	"time"
)

func TestFakeFiresDueTimersOnly(t *testing.T) {
	t.Parallel()
	c := NewFake(time.Unix(0, 0))
	fired := make(chan string, 3)
	c.AfterFunc(time.Second, func() { fired <- "1s" })
	stopped := c.AfterFunc(2*time.Second, func() { fired <- "2s" })
	c.AtFunc(time.Unix(3, 0), func() { fired <- "3s" }) // a moment, not a delay: the same
	c.Advance(999 * time.Millisecond)
	select {
	case f := <-fired:
		t.Fatalf("%s timer fired early", f)
	default:
	}
	c.Advance(time.Millisecond)
	if f := <-fired; f != "1s" {
		t.Fatalf("fired %s, want 1s", f)
	}
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	c.Advance(2 * time.Second)
	if f := <-fired; f != "3s" {
		t.Fatalf("fired %s, want 3s (the 2s timer was stopped)", f)
	}
	if got := c.Now(); !got.Equal(time.Unix(3, 0)) {
		t.Fatalf("Now = %v", got)
	}
}

// AtFunc for a moment the clock has passed fires at once: a deadline set late is not missed.
func TestFakeAtFuncForAPassedMomentFiresAtOnce(t *testing.T) {
	t.Parallel()
	c := NewFake(time.Unix(100, 0))
	fired := make(chan struct{})
	c.AtFunc(time.Unix(99, 0), func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second): // real time: the fake clock is never advanced here
		t.Fatal("a timer for a moment the clock had passed did not fire")
	}
}
