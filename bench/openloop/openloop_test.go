package openloop

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The producer makes rate calls a second, the warm-up's untimed, and the report gives the
// percentiles of what the handlers recorded.
func TestProduceAndReport(t *testing.T) {
	var calls, timed atomic.Int64
	var l Latencies
	Produce(200, 1500*time.Millisecond, func(sent time.Time) {
		calls.Add(1)
		var at int64 // a job of the warm-up carries 0
		if !sent.IsZero() {
			timed.Add(1)
			at = sent.UnixNano()
		}
		l.Started(at)
	})
	if calls.Load() != 300 || timed.Load() != 100 {
		t.Fatalf("%d calls, %d timed; want 300 and the last 100", calls.Load(), timed.Load())
	}
	line, err := l.Report("x", 200)
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(line); len(f) != 11 || f[3] != "100" || f[0] != "x" {
		t.Fatalf("report %q: want 100 samples and the scripts' fields", line)
	}
	var none Latencies
	if _, err := none.Report("x", 200); err == nil {
		t.Fatal("a report of no samples did not fail")
	}
}

// Split makes every call exactly once, from as many goroutines at once as it is given
// producers, each making its calls one at a time.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ n, producers, most int }{{10, 1, 1}, {100, 8, 8}, {3, 64, 3}, {0, 4, 0}} {
		seen := make([]atomic.Int64, c.n)
		var now, most atomic.Int64
		Split(c.n, c.producers, func(i int) {
			n := now.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // long enough for the others to start theirs
			seen[i].Add(1)
			now.Add(-1)
		})
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Fatalf("n=%d producers=%d: call %d made %d times", c.n, c.producers, i, seen[i].Load())
			}
		}
		if most.Load() > int64(c.most) {
			t.Fatalf("n=%d producers=%d: %d calls at once, want at most %d", c.n, c.producers, most.Load(), c.most)
		}
	}
}
