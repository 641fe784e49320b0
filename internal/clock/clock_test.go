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
	c.AfterFunc(3*time.Second, func() { fired <- "3s" })
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

// AtFunc fires at its moment, not at a delay measured from a reading of the clock: a moment
// already passed fires at once, and one ahead fires on the advance that reaches it.
func TestFakeAtFuncFiresAtItsMoment(t *testing.T) {
	t.Parallel()
	start := time.Unix(100, 0)
	c := NewFake(start)
	fired := make(chan string, 2)
	c.AtFunc(start.Add(-time.Second), func() { fired <- "past" })
	if f := <-fired; f != "past" {
		t.Fatalf("fired %s, want past", f)
	}
	c.AtFunc(start.Add(time.Second), func() { fired <- "ahead" })
	c.Advance(999 * time.Millisecond)
	select {
	case f := <-fired:
		t.Fatalf("%s timer fired early", f)
	default:
	}
	c.Advance(time.Millisecond)
	if f := <-fired; f != "ahead" {
		t.Fatalf("fired %s, want ahead", f)
	}
}
