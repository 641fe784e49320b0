package dispatchrule_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// free is a worker of type "t" on every queue with a free slot.
var free = dispatchrule.Worker{Types: []string{"t"}, Free: 1}

func TestCheck(t *testing.T) {
	t.Parallel()
	ready := dispatchrule.Job{Type: "t", Queue: "q", RunAt: now}
	tests := []struct {
		name string
		job  dispatchrule.Job
		st   dispatchrule.State
		want dispatchrule.Reason
	}{
		{"ready with a free worker", ready, dispatchrule.State{Workers: []dispatchrule.Worker{free}}, dispatchrule.None},
		{"run time to come", dispatchrule.Job{Type: "t", Queue: "q", RunAt: now.Add(time.Second)},
			dispatchrule.State{Queue: dispatchrule.Queue{Paused: true}, Workers: []dispatchrule.Worker{free}}, dispatchrule.Scheduled},
		{"paused ahead of full", ready, dispatchrule.State{Queue: dispatchrule.Queue{Paused: true, Cap: 1, Held: 1}}, dispatchrule.QueuePaused},
		{"at its cap", ready, dispatchrule.State{Queue: dispatchrule.Queue{Cap: 2, Held: 2}, Workers: []dispatchrule.Worker{free}}, dispatchrule.QueueAtCap},
		{"over its cap, lowered", ready, dispatchrule.State{Queue: dispatchrule.Queue{Cap: 1, Held: 3}}, dispatchrule.QueueAtCap},
		{"room under its cap", ready, dispatchrule.State{Queue: dispatchrule.Queue{Cap: 2, Held: 1}, Workers: []dispatchrule.Worker{free}}, dispatchrule.None},
		{"breaker open", ready, dispatchrule.State{Breaker: dispatchrule.Breaker{State: dispatchrule.Open}, Workers: []dispatchrule.Worker{free}}, dispatchrule.BreakerOpen},
		{"probes all running", ready, dispatchrule.State{Breaker: dispatchrule.Breaker{State: dispatchrule.HalfOpen}}, dispatchrule.BreakerProbing},
		{"probe room", ready, dispatchrule.State{Breaker: dispatchrule.Breaker{State: dispatchrule.HalfOpen, ProbeRoom: 1}, Workers: []dispatchrule.Worker{free}}, dispatchrule.None},
		{"no worker", ready, dispatchrule.State{}, dispatchrule.NoWorker},
		{"worker of another type", ready, dispatchrule.State{Workers: []dispatchrule.Worker{{Types: []string{"u"}, Free: 1}}}, dispatchrule.NoWorker},
		{"worker of other queues", ready, dispatchrule.State{Workers: []dispatchrule.Worker{{Types: []string{"t"}, Queues: []string{"r"}, Free: 1}}}, dispatchrule.NoWorker},
		{"worker draining", ready, dispatchrule.State{Workers: []dispatchrule.Worker{{Types: []string{"t"}, Free: 1, Closed: true}}}, dispatchrule.NoWorker},
		{"workers busy", ready, dispatchrule.State{Workers: []dispatchrule.Worker{{Types: []string{"t"}, Queues: []string{"q"}}}}, dispatchrule.WorkerSlot},
		{"one worker of two free", ready, dispatchrule.State{Workers: []dispatchrule.Worker{{Types: []string{"t"}}, free}}, dispatchrule.None},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.st.Now = now
			if got := dispatchrule.Check(tt.job, tt.st); got != tt.want {
				t.Errorf("Check = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMayOffer(t *testing.T) {
	t.Parallel()
	j := dispatchrule.Job{Type: "t", Queue: "q", RunAt: now}
	st := dispatchrule.State{Now: now, Workers: []dispatchrule.Worker{free}}
	if !dispatchrule.MayOffer(j, st, false) {
		t.Error("a job under no rule, with nothing waiting ahead, may not be offered")
	}
	if dispatchrule.MayOffer(j, st, true) {
		t.Error("a job may be offered ahead of one that waits")
	}
	st.Queue = dispatchrule.Queue{Cap: 5}
	if dispatchrule.MayOffer(j, st, false) {
		t.Error("a capped queue's job may be offered, though an offer counts no room")
	}
	st.Queue = dispatchrule.Queue{}
	st.Breaker = dispatchrule.Breaker{State: dispatchrule.HalfOpen, ProbeRoom: 1}
	if dispatchrule.MayOffer(j, st, false) {
		t.Error("a job may be offered as a probe")
	}
}

// A job waits for the first rule that holds it back, in the order the rules apply.
func ExampleCheck() {
	j := dispatchrule.Job{Type: "email", Queue: "bulk", RunAt: now}
	st := dispatchrule.State{
		Now:     now,
		Queue:   dispatchrule.Queue{Cap: 2, Held: 2},
		Breaker: dispatchrule.Breaker{State: dispatchrule.Open},
		Workers: []dispatchrule.Worker{{Types: []string{"email"}, Free: 4}},
	}
	fmt.Println(dispatchrule.Check(j, st))
	st.Queue.Held = 1
	fmt.Println(dispatchrule.Check(j, st))
	st.Breaker = dispatchrule.Breaker{State: dispatchrule.HalfOpen, ProbeRoom: 1}
	fmt.Println(dispatchrule.Check(j, st))
	// Output:
	// queue_at_cap
	// breaker_open
	// none
}
