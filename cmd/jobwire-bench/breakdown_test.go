package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jobwire/jobwire/internal/stages"
)

// Every stage the breakdown prints is measured: each timed request passed both of its points,
// with auth off and on (where every call carries a token).
func TestBreakdownPassesEveryPoint(t *testing.T) {
	// Not parallel: the breakdown sets the broker's OTEL_* variables and traces process-wide.
	for _, s := range []breakdownSetup{{name: "bare"}, {name: "auth", auth: true}} {
		t.Run(s.name, func(t *testing.T) {
			enq, del, err := breakdownOne(context.Background(), s, filepath.Join(t.TempDir(), s.name), false, 10)
			if err != nil {
				t.Fatal(err)
			}
			check := func(phase string, traces []*stages.Trace, rows []stage) {
				t.Helper()
				if len(traces) != 10 {
					t.Fatalf("%s: %d traces, want 10", phase, len(traces))
				}
				for i, tr := range traces {
					for _, st := range rows {
						if _, ok := tr.Between(st.from, st.to); !ok {
							t.Errorf("%s, enqueue %d: stage %q (%v to %v) not measured", phase, i, st.name, st.from, st.to)
						}
					}
				}
			}
			check("enqueue", enq, enqueueStages)
			check("delivery", del, append(enqueueStages[:8:8], deliveryStages...))
		})
	}
}
