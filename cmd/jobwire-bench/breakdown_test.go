package main

import (
	"context"
	"os"
	"testing"

	"github.com/jobwire/jobwire/internal/stages"
)

// Every stage the breakdown prints is measured: each timed request passed both of its points,
// with auth off and on (where every call carries a token), on SQLite and, where the tests have
// a PostgreSQL database (JOBWIRE_TEST_POSTGRES), on PostgreSQL.
func TestBreakdownPassesEveryPoint(t *testing.T) {
	// Not parallel: the breakdown sets the broker's OTEL_* variables and traces process-wide.
	runs := []struct {
		store string
		cfg   benchConfig
	}{{store: "sqlite"}}
	if pg := os.Getenv("JOBWIRE_TEST_POSTGRES"); pg != "" {
		runs = append(runs, struct {
			store string
			cfg   benchConfig
		}{"postgres", benchConfig{Postgres: pg}})
	}
	for _, r := range runs {
		for _, s := range []breakdownSetup{{name: "bare"}, {name: "auth", auth: true}} {
			t.Run(r.store+"/"+s.name, func(t *testing.T) { checkBreakdown(t, &r.cfg, s, 0) })
		}
		t.Run(r.store+"/paced", func(t *testing.T) { checkBreakdown(t, &r.cfg, breakdownSetup{name: "bare"}, 1000) })
	}
}

// checkBreakdown runs setup s's breakdown of 10 enqueues on a fresh database of cfg's store,
// the worker's phase paced at rate (0: one after another). At a rate a trace whose writer's
// marks went to another write is left out: most must be kept.
func checkBreakdown(t *testing.T, cfg *benchConfig, s breakdownSetup, rate int) {
	t.Helper()
	const n = 10
	enq, del, err := breakdownOn(context.Background(), s, cfg, t.TempDir(), false, n, rate)
	if err != nil {
		t.Fatal(err)
	}
	check := func(phase string, traces []*stages.Trace, rows []stage, least int) {
		t.Helper()
		if len(traces) < least || len(traces) > n {
			t.Fatalf("%s: %d traces, want %d to %d", phase, len(traces), least, n)
		}
		for i, tr := range traces {
			for _, st := range rows {
				if _, ok := tr.Between(st.from, st.to); !ok {
					t.Errorf("%s, enqueue %d: stage %q (%v to %v) not measured", phase, i, st.name, st.from, st.to)
				}
			}
		}
	}
	delivered := n
	if rate > 0 {
		delivered = n / 2
	}
	check("enqueue", enq, enqueueStages, n)
	check("delivery", del, append(enqueueStages[:8:8], deliveryStages...), delivered)
}
