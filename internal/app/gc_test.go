package app_test

import (
	"runtime/debug"
	"testing"
)

// The broker collects garbage at GOGC 400 unless the environment names a GOGC of its own, as
// docs/performance.md's tuning table says. Not parallel: the setting is the process's.
func TestBrokerSetsGOGCUnlessTheEnvironmentDoes(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int // the GC percent once the broker runs, from 100 before it
	}{
		{env: "", want: 400},
		{env: "150", want: 100}, // left alone (the runtime read GOGC at start, not now)
	} {
		t.Run("GOGC="+c.env, func(t *testing.T) {
			t.Setenv("GOGC", c.env)
			prev := debug.SetGCPercent(100)
			t.Cleanup(func() { debug.SetGCPercent(prev) })
			runBroker(t, nil)
			if got := debug.SetGCPercent(100); got != c.want {
				t.Errorf("with GOGC=%q the broker runs at GC percent %d, want %d", c.env, got, c.want)
			}
		})
	}
}
