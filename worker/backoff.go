package worker

import (
	"math/rand/v2"
	"time"
)

// Backoff is a full-jitter exponential backoff: before retry n (from 0) it waits a uniformly random
// time in [0, min(Max, Base*2^n)). Full jitter spreads a fleet of workers that lost the broker at
// the same moment, so they do not all reconnect in the same instant.
type Backoff struct {
	// Base is the ceiling of the first delay. Zero means 100ms.
	Base time.Duration
	// Max caps the ceiling. Zero means 5s.
	Max time.Duration
	// Rand returns a number in [0, 1). Nil means math/rand/v2. Tests set it to make delays
	// deterministic; a Rand that returns 0 makes every delay zero.
	Rand func() float64
}

const (
	defaultBackoffBase = 100 * time.Millisecond
	defaultBackoffMax  = 5 * time.Second
)

// Ceiling is the deterministic part of the delay before retry n: min(Max, Base*2^n).
func (b Backoff) Ceiling(n int) time.Duration {
	base, maxDelay := b.Base, b.Max
	if base <= 0 {
		base = defaultBackoffBase
	}
	if maxDelay <= 0 {
		maxDelay = defaultBackoffMax
	}
	d := base
	for range max(n, 0) {
		if d >= maxDelay/2 {
			return maxDelay
		}
		d *= 2
	}
	return min(d, maxDelay)
}

// Delay is the jittered delay before retry n.
func (b Backoff) Delay(n int) time.Duration {
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(b.Ceiling(n)))
}
