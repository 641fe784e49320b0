package broker

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// promoterBundle is a promoter on a fake clock whose promotions a test scripts.
type promoterBundle struct {
	p      *promoter
	clk    *clock.Fake
	t0     time.Time
	leader atomic.Bool
	ready  atomic.Int32

	mu    sync.Mutex
	calls []time.Time        // the moments promotions ran for
	next  []promotionOutcome // what the next promotions return, in order
}

type promotionOutcome struct {
	n    int
	next time.Time // zero: no job left SCHEDULED
	err  error
}

func newPromoterBundle(t *testing.T) *promoterBundle {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	pb := &promoterBundle{clk: clk, t0: clk.Now()}
	pb.leader.Store(true)
	pb.p = newPromoter(promoterConfig{clk: clk, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		leader: pb.leader.Load, ready: func() { pb.ready.Add(1) },
		promote: func(now time.Time) (int, time.Time, bool, error) {
			pb.mu.Lock()
			defer pb.mu.Unlock()
			pb.calls = append(pb.calls, now)
			var o promotionOutcome
			if len(pb.next) > 0 {
				o, pb.next = pb.next[0], pb.next[1:]
			}
			return o.n, o.next, !o.next.IsZero(), o.err
		}})
	pb.p.Promoted.Init()
	if err := pb.p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pb.p.Stop()
		<-pb.p.Stopped()
	})
	return pb
}

func (pb *promoterBundle) script(o ...promotionOutcome) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	pb.next = append(pb.next, o...)
}

// promoted waits for the next promotion and returns how many jobs it made ready.
func (pb *promoterBundle) promoted(t *testing.T) int {
	t.Helper()
	n, ok := pb.p.Promoted.Wait(10 * time.Second)
	if !ok {
		t.Fatal("no promotion ran")
	}
	return n
}

func (pb *promoterBundle) armedFor(t *testing.T, want time.Time) {
	t.Helper()
	armed, at := pb.p.armed()
	if !armed || !at.Equal(want) {
		t.Fatalf("timer armed %v for %v, want armed for %v", armed, at, want)
	}
}

func TestPromoterWakesForTheEarliestDueJob(t *testing.T) {
	t.Parallel()
	pb := newPromoterBundle(t)
	pb.p.schedule(pb.t0.Add(time.Minute))
	pb.p.schedule(pb.t0.Add(time.Hour)) // later: the timer stays
	pb.armedFor(t, pb.t0.Add(time.Minute))
	pb.p.schedule(pb.t0.Add(time.Second)) // earlier: the timer moves
	pb.armedFor(t, pb.t0.Add(time.Second))

	// The promotion reads the next due time and arms the timer for it.
	pb.script(promotionOutcome{n: 2, next: pb.t0.Add(time.Hour)})
	pb.clk.Advance(time.Second)
	if n := pb.promoted(t); n != 2 {
		t.Fatalf("promoted %d, want 2", n)
	}
	if pb.ready.Load() != 1 {
		t.Fatal("jobs made ready were not signalled")
	}
	pb.armedFor(t, pb.t0.Add(time.Hour))
}

func TestPromoterRetriesAFailedPromotion(t *testing.T) {
	t.Parallel()
	pb := newPromoterBundle(t)
	pb.script(promotionOutcome{err: errors.New("database gone")}, promotionOutcome{n: 1})
	pb.p.schedule(pb.t0.Add(time.Second))
	pb.clk.Advance(time.Second)
	pb.promoted(t)
	pb.armedFor(t, pb.t0.Add(time.Second+promoteRetry))
	pb.clk.Advance(promoteRetry)
	if n := pb.promoted(t); n != 1 {
		t.Fatalf("the retry promoted %d, want 1", n)
	}
	if armed, _ := pb.p.armed(); armed {
		t.Fatal("a timer is armed with no job left SCHEDULED")
	}
}

func TestPromoterArmsNothingOffTheLeaderOrOnceStopped(t *testing.T) {
	t.Parallel()
	pb := newPromoterBundle(t)
	pb.p.schedule(pb.t0.Add(time.Second))
	// A broker that stops leading disarms (clustered.onLeadership); a follower arms nothing.
	pb.leader.Store(false)
	pb.p.disarm()
	pb.p.schedule(pb.t0.Add(time.Second))
	if armed, _ := pb.p.armed(); armed {
		t.Fatal("a broker that does not lead armed the timer")
	}
	pb.p.promoteNow()
	if len(pb.calls) != 0 {
		t.Fatal("a broker that does not lead promoted")
	}

	pb.leader.Store(true)
	pb.p.schedule(pb.t0.Add(time.Second))
	pb.p.Stop()
	if armed, _ := pb.p.armed(); armed {
		t.Fatal("the timer is still armed after the stop")
	}
	pb.p.schedule(pb.t0.Add(time.Second))
	pb.p.promoteNow()
	pb.clk.Advance(time.Hour)
	<-pb.p.Stopped()
	if armed, _ := pb.p.armed(); armed || len(pb.calls) != 0 {
		t.Fatalf("after the stop: armed %v, %d promotions, want none", armed, len(pb.calls))
	}
}
