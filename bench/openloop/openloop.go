// Package openloop is what the peer harnesses (bench/asynq, bench/faktory, bench/river) share
// to measure enqueue-to-start the way jobwire-bench's latency scenario does: an open-loop
// producer, and the start latencies its jobs' handlers record. It is a module of its own, which
// each harness replaces with this folder, so that no harness depends on another's peer.
package openloop

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Warmup is how long the producer runs before its jobs are timed.
const Warmup = time.Second

// Split makes n calls of do (with the call's number, 0 to n-1) from producers goroutines at
// once, each making its calls one after the other, and returns once all have returned: a
// closed-loop producer per goroutine, as jobwire-bench's e2e scenarios run them.
func Split(n, producers int, do func(i int)) {
	producers = max(1, min(producers, n))
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := p; i < n; i += producers {
				do(i)
			}
		})
	}
	wg.Wait()
}

// Produce calls send once per job at rate a second for d, in an open loop: the i-th call is due
// at i/rate seconds and runs in a goroutine of its own, so a slow one delays none of the next
// (with a ticker, which drops ticks while its reader is busy, slow periods would go unsampled
// and the rate would fall short). send gets the time taken just before it was called, for the
// job to carry, or the zero time for the jobs of the warm-up, which are not timed. Produce
// returns once every call has returned.
func Produce(rate int, d time.Duration, send func(sent time.Time)) {
	interval := time.Second / time.Duration(rate)
	total := int(d / interval)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		measure := due.Sub(start) >= Warmup
		wg.Go(func() {
			var sent time.Time
			if measure {
				sent = time.Now()
			}
			send(sent)
		})
	}
	wg.Wait()
}

// Latencies collects how long timed jobs took to start; handlers add to it concurrently.
type Latencies struct {
	mu sync.Mutex
	xs []time.Duration
}

// Started records the start of a job sent at the time in nanoseconds since the Unix epoch that
// it carried; a job of the warm-up carries 0 and is not recorded.
func (l *Latencies) Started(sentUnixNano int64) {
	if sentUnixNano == 0 {
		return
	}
	d := time.Since(time.Unix(0, sentUnixNano))
	l.mu.Lock()
	l.xs = append(l.xs, d)
	l.mu.Unlock()
}

// Report is the line the side-by-side scripts read (fields 7 and 10: p50 and p99 in ms), for
// system at rate a second, once the last jobs had time to start; it is an error if none did.
func (l *Latencies) Report(system string, rate int) (string, error) {
	time.Sleep(500 * time.Millisecond) // the last jobs start
	l.mu.Lock()
	xs := slices.Clone(l.xs)
	l.mu.Unlock()
	if len(xs) == 0 {
		return "", fmt.Errorf("%s latency %d/s: no timed job started", system, rate)
	}
	slices.Sort(xs)
	pct := func(p float64) float64 { return float64(xs[int(math.Ceil(p*float64(len(xs))))-1]) / 1e6 }
	return fmt.Sprintf("%s latency %d/s: %d samples p50 %.2f ms p99 %.2f ms", system, rate, len(xs), pct(0.5), pct(0.99)), nil
}
