// Package ratelimit holds the rule of a rate limit: at most Rate job starts per Per, with bursts
// of up to Burst after a quiet spell. It only computes, with the moment passed in; the stores
// keep each bucket's state and the dispatcher asks the rule before it leases a job.
//
// The rule is a token bucket in the form of the generic cell rate algorithm (GCRA): a bucket is
// one moment, its theoretical arrival time (TAT), the time by which every start it let through
// would have been spread out at the steady rate. A start is allowed at now when the TAT is no
// further than Burst emission intervals past now, and moves the TAT one interval on. The state
// is one integer, so a database can hold it in a row and brokers sharing that row agree to the
// nanosecond, and it needs no refill step: an idle bucket simply has a TAT in the past.
package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Limit is at most Rate starts per Per, with up to Burst at once after a quiet spell.
type Limit struct {
	Rate  int
	Per   time.Duration
	Burst int
}

// Validate refuses a limit that cannot let anything through or cannot be stored.
func (l Limit) Validate() error {
	switch {
	case l.Rate < 1:
		return fmt.Errorf("rate must be at least 1, got %d", l.Rate)
	case l.Per < time.Millisecond:
		return fmt.Errorf("interval must be at least 1ms, got %s", l.Per)
	case l.Burst < 1:
		return fmt.Errorf("burst must be at least 1, got %d", l.Burst)
	case l.Per/time.Duration(l.Rate) <= 0:
		return errors.New("rate is too high for its interval: less than a nanosecond between starts")
	}
	return nil
}

// Emission is the steady spacing between starts: Per / Rate (at least 1ns).
func (l Limit) Emission() time.Duration { return max(l.Per/time.Duration(l.Rate), 1) }

// Bucket is a limit's state for one key: its theoretical arrival time. The zero Bucket is a full
// one.
type Bucket struct{ TAT time.Time }

// Allowance is how many starts the bucket lets through at now, from 0 to Burst.
func (l Limit) Allowance(b Bucket, now time.Time) int {
	t := l.Emission()
	tat := later(b.TAT, now)
	// Each start moves the TAT one interval on; the last one allowed leaves it at most Burst
	// intervals past now.
	n := int((now.Add(time.Duration(l.Burst) * t).Sub(tat)) / t)
	return min(max(n, 0), l.Burst)
}

// Take lets one start through at now if the bucket allows it, and returns the bucket after it;
// b unchanged and false when it does not.
func (l Limit) Take(b Bucket, now time.Time) (Bucket, bool) {
	if l.Allowance(b, now) < 1 {
		return b, false
	}
	return Bucket{TAT: later(b.TAT, now).Add(l.Emission())}, true
}

// NextAt is the earliest moment the bucket lets one more start through: now when it does now.
func (l Limit) NextAt(b Bucket, now time.Time) time.Time {
	if l.Allowance(b, now) > 0 {
		return now
	}
	// Allowed once TAT + T - now <= Burst * T.
	return b.TAT.Add(-time.Duration(l.Burst-1) * l.Emission())
}

// String reads as "50/1s burst 10".
func (l Limit) String() string { return fmt.Sprintf("%d/%s burst %d", l.Rate, l.Per, l.Burst) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
