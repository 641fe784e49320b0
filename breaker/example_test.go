package breaker_test

import (
	"fmt"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
)

// A dispatcher asks for a permit per job and ends each permit with the job's result. Three
// failures open the breaker; after OpenFor one probe is let through, and its success closes the
// breaker again.
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := breaker.CountConfig()
	cfg.Threshold = 3

	set, err := breaker.NewSet(clk, cfg, nil, func(tr breaker.Transition) {
		// The broker stores tr.Saved here and logs the change.
		fmt.Printf("%s: %v -> %v (%v), generation %d\n", tr.Type, tr.From, tr.To, tr.Reason, tr.Generation)
	})
	if err != nil {
		panic(err)
	}

	for range 3 {
		p, _ := set.Acquire("invoice.send")
		set.Failure(p, breaker.Transient)
	}
	_, ok := set.Acquire("invoice.send")
	fmt.Println("dispatch allowed:", ok)

	next, _ := set.NextChange()
	clk.Advance(next.Sub(clk.Now()))
	fmt.Println("allowance:", set.Allowance("invoice.send"))

	probe, _ := set.Acquire("invoice.send")
	// A worker refused the job before user code started: hand the probe slot back.
	set.Release(probe)
	probe, _ = set.Acquire("invoice.send")
	set.Success(probe)
	fmt.Println("allowance:", set.Allowance("invoice.send") == breaker.Unlimited)

	// Output:
	// invoice.send: CLOSED -> OPEN (threshold), generation 2
	// dispatch allowed: false
	// invoice.send: OPEN -> HALF_OPEN (open_elapsed), generation 3
	// allowance: 1
	// invoice.send: HALF_OPEN -> CLOSED (probes_succeeded), generation 4
	// allowance: true
}

// Two brokers share one breaker through a stored state: each change is made on the state as
// stored (under the database's row lock, in a broker) and stored back, and each broker's Set
// caches what was stored. Failures counted on either broker add up, and the one probe slot is
// held across both.
func ExampleSet_Shared() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := breaker.CountConfig()
	cfg.Threshold = 2
	a, _ := breaker.NewSet(clk, cfg, nil, nil)
	b, _ := breaker.NewSet(clk, cfg, nil, nil)
	a.Cache()
	b.Cache()

	var stored *breaker.Saved // the database row
	change := func(set *breaker.Set, fn func(sh *breaker.Shared)) {
		sh, err := set.Shared("invoice.send", stored)
		if err != nil {
			panic(err)
		}
		fn(sh)
		saved := sh.Saved()
		stored = &saved
		for _, tr := range sh.Transitions() { // reported once the state is stored
			fmt.Printf("%v -> %v (%v), generation %d\n", tr.From, tr.To, tr.Reason, tr.Generation)
		}
		_ = set.Load(saved) // the broker's cache; the others read it on the change's event
	}

	for job, set := range []*breaker.Set{a, b} {
		change(set, func(sh *breaker.Shared) {
			p, _ := sh.Acquire(int64(job), "")
			sh.Failure(p, breaker.Transient, breaker.Attempt{Job: int64(job), Number: 1})
		})
	}
	clk.Advance(cfg.OpenFor)
	change(a, func(sh *breaker.Shared) { sh.Acquire(7, "broker-a") })
	change(b, func(sh *breaker.Shared) {
		_, ok := sh.Acquire(8, "broker-b")
		fmt.Println("second probe allowed:", ok)
	})
	// Broker b ends job 7's lease (its worker reconnected there), knowing no permit for it.
	change(b, func(sh *breaker.Shared) { sh.Success(sh.Permit(7, breaker.Permit{})) })

	// Output:
	// CLOSED -> OPEN (threshold), generation 2
	// OPEN -> HALF_OPEN (open_elapsed), generation 3
	// second probe allowed: false
	// HALF_OPEN -> CLOSED (probes_succeeded), generation 4
}
