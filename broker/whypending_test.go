package broker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
)

// WhyPending names each rule that holds a job back, as the dispatcher applies it, on a fake
// clock: the run time, a paused queue, a queue at its cap, an OPEN breaker, a HALF_OPEN one
// with its probes out, no worker, and a ready job waiting for a free slot.
func TestWhyPendingNamesEachRule(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	clk := b.clk.(*clock.Fake)
	ctx := context.Background()
	why := func(id int64) Waiting {
		t.Helper()
		j, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return b.WhyPending(j)
	}
	expect := func(id int64, want WaitReason, detail string) Waiting {
		t.Helper()
		w := why(id)
		if w.Reason != want || !strings.Contains(w.Detail, detail) {
			t.Fatalf("job %d waits for %s (%q), want %s with %q", id, w.Reason, w.Detail, want, detail)
		}
		return w
	}
	enqueue := func(spec JobSpec) int64 {
		t.Helper()
		res, err := b.Enqueue(ctx, []JobSpec{spec})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].ID
	}

	later := enqueue(JobSpec{Type: "mail", Queue: "q", Delay: time.Hour})
	if w := expect(later, WaitScheduled, "scheduled for 2026-03-01T01:00:00Z"); !w.Until.Equal(clk.Now().Add(time.Hour)) {
		t.Errorf("scheduled until %v, want an hour on", w.Until)
	}

	first := enqueue(JobSpec{Type: "mail", Queue: "q"})
	expect(first, WaitNoWorker, `type "mail" on queue "q"`)

	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"mail"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first job handed out", func() bool { return slices.Contains(assignedIDs(s), first) })
	if w := why(first); w.Reason != WaitNone {
		t.Errorf("a leased job waits for %s", w.Reason)
	}
	second := enqueue(JobSpec{Type: "mail", Queue: "q"})
	expect(second, WaitWorkerSlot, "free slot")

	if err := b.SetQueueLimit(ctx, "q", 1); err != nil {
		t.Fatal(err)
	}
	if w := expect(second, WaitQueueAtCap, "cap of 1"); w.Limit != 1 {
		t.Errorf("cap %d, want 1", w.Limit)
	}
	if err := b.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	expect(second, WaitQueuePaused, `queue "q" is paused`)

	// A type whose breaker is OPEN, then HALF_OPEN with its one probe out.
	probe := enqueue(JobSpec{Type: "sms", Queue: "r"})
	if _, err := b.ForceBreaker(ctx, "sms", breaker.StateOpen); err != nil {
		t.Fatal(err)
	}
	info, _ := b.breakers.Info("sms")
	if w := expect(probe, WaitBreakerOpen, "OPEN until"); !w.Until.Equal(info.NextProbeAt) || w.Until.IsZero() {
		t.Errorf("open until %v, want the next probe at %v", w.Until, info.NextProbeAt)
	}
	clk.Advance(info.NextProbeAt.Sub(clk.Now()))
	// HALF_OPEN with a slot free: nothing but a worker is missing.
	expect(probe, WaitNoWorker, `type "sms"`)
	sms, _, err := b.Open(ctx, Hello{WorkerID: "w2", Types: []string{"sms"}, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the probe handed out", func() bool { return slices.Contains(assignedIDs(sms), probe) })
	held := enqueue(JobSpec{Type: "sms", Queue: "r"})
	expect(held, WaitBreakerProbing, "HALF_OPEN")
}
