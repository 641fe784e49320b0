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
	cfg := breaker.DefaultConfig()
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
