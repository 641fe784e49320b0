package server

import (
	"testing"
	"time"
)

// SetCoalesceFor sets how long a watch of many jobs gathers changes before it reads them (20 ms
// otherwise), for every call, until the test ends: a test that calls it cannot run in parallel.
func SetCoalesceFor(t testing.TB, d time.Duration) {
	gatherFor.Store(int64(d))
	t.Cleanup(func() { gatherFor.Store(0) })
}
