// Package retry holds the job retry policy: how many attempts a job gets, how long it waits
// between them, and how old it may grow. It only computes; the broker applies the result.
package retry

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Policy is one job type's retry policy.
type Policy struct {
	// Base is the wait after the first failed attempt, before jitter.
	Base time.Duration
	// Multiplier grows the wait for each further attempt.
	Multiplier float64
	// MaxDelay is a true cap: neither the wait nor its jitter goes past it.
	MaxDelay time.Duration
	// JitterMax is the widest random spread added to the wait, so jobs that failed together do
	// not all come back at once.
	JitterMax time.Duration
	// MaxAttempts counts the first run: 4 means one run and three retries.
	MaxAttempts int
	// MaxJobAge: a retry that would start after created_at + MaxJobAge is not made.
	MaxJobAge time.Duration
}

// DefaultPolicy is 3s, 6s, 12s... capped at 1h, up to 1s of jitter, four attempts, one day of life.
func DefaultPolicy() Policy {
	return Policy{
		Base:        3 * time.Second,
		Multiplier:  2,
		MaxDelay:    time.Hour,
		JitterMax:   time.Second,
		MaxAttempts: 4,
		MaxJobAge:   24 * time.Hour,
	}
}

// Validate reports the first setting that cannot work, naming it.
func (p Policy) Validate() error {
	var errs []error
	if p.Base <= 0 {
		errs = append(errs, fmt.Errorf("base_delay must be positive, got %s", p.Base))
	}
	if p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("multiplier must be a finite number >= 1, got %v", p.Multiplier))
	}
	if p.MaxDelay < p.Base {
		errs = append(errs, fmt.Errorf("max_delay (%s) must be at least base_delay (%s)", p.MaxDelay, p.Base))
	}
	if p.JitterMax < 0 {
		errs = append(errs, fmt.Errorf("jitter_max must not be negative, got %s", p.JitterMax))
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("max_attempts must be 1..1000, got %d", p.MaxAttempts))
	}
	if p.MaxJobAge <= 0 {
		errs = append(errs, fmt.Errorf("max_job_age must be positive, got %s", p.MaxJobAge))
	}
	return errors.Join(errs...)
}

// Capped is the deterministic part of the wait after failed attempt number attempt (1-based):
// min(base * multiplier^(attempt-1), max_delay).
func (p Policy) Capped(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(p.Multiplier, float64(attempt-1))
	if d >= float64(p.MaxDelay) || math.IsInf(d, 0) {
		return p.MaxDelay
	}
	return time.Duration(d)
}

// JitterWindow is how much random spread the wait after attempt may get:
// min(jitter_max, max(0, max_delay - capped)), so jitter never pushes past the cap.
func (p Policy) JitterWindow(attempt int) time.Duration {
	return min(p.JitterMax, max(0, p.MaxDelay-p.Capped(attempt)))
}

// Delay is the wait after failed attempt number attempt, given u drawn from U[0,1):
// capped + u * window.
func (p Policy) Delay(attempt int, u float64) time.Duration {
	return p.Capped(attempt) + time.Duration(u*float64(p.JitterWindow(attempt)))
}

// Wait is Delay, unless the worker asked for a retry-after: that replaces the computed wait,
// still capped by MaxDelay.
func (p Policy) Wait(attempt int, u float64, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, p.MaxDelay)
	}
	return p.Delay(attempt, u)
}
