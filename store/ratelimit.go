package store

import (
	"context"
	"strings"
	"time"

	"github.com/jobwire/jobwire/ratelimit"
)

// Rate limits (ratelimit.Rule) are rows of their own; each bucket's state (its theoretical
// arrival time) is a row per limit and key, written by the lease that takes from it. A lease
// with JobLeaseParams.Rates set reads the limits and the buckets its jobs count in, lets
// through only the jobs ratelimit.Gate admits, in dispatch order, and writes the buckets back
// in the same transaction. PostgreSQL takes the limits' rows FOR UPDATE first (lockorder.go), so
// brokers sharing the database take turns at the buckets and never spend one allowance twice.

// RateLimitRecord is a stored rate limit.
type RateLimitRecord struct {
	ratelimit.Rule
	UpdatedAt time.Time
}

// RateBucketRecord is a stored bucket of a limit.
type RateBucketRecord struct {
	Name, Key string
	TAT       time.Time
}

// RateLease is a lease's part in rate limiting (JobLeaseParams.Rates). The leases of one
// round share it.
type RateLease struct {
	// NextAt is set by the leases to the earliest moment a job they held back may start (left
	// as it is when they held none back): when the dispatcher must look again.
	NextAt time.Time
}

// Held records that a lease held a job back until at.
func (r *RateLease) Held(at time.Time) {
	if !at.IsZero() && (r.NextAt.IsZero() || at.Before(r.NextAt)) {
		r.NextAt = at
	}
}

// RateLimitReader reads rate limits outside a write.
type RateLimitReader interface {
	// RateLimitLoadAll reads every rate limit, by name.
	RateLimitLoadAll(ctx context.Context) ([]RateLimitRecord, error)
	// RateBucketLoad reads the stored buckets of the limit name, by key.
	RateBucketLoad(ctx context.Context, name string) ([]RateBucketRecord, error)
}

// RateLimitTx writes rate limits.
type RateLimitTx interface {
	// RateLimitPut creates or replaces the limit r.Name. A changed limit keeps its buckets.
	RateLimitPut(r RateLimitRecord) error
	// RateLimitDelete removes the limit name and its buckets; false when there was none.
	RateLimitDelete(name string) (bool, error)
}

// Rules are the limits of recs as the gate reads them.
func Rules(recs []RateLimitRecord) []ratelimit.Rule {
	rules := make([]ratelimit.Rule, len(recs))
	for i, r := range recs {
		rules[i] = r.Rule
	}
	return rules
}

// RateExclusion is the condition that leaves out the jobs of bucket h, with ph a placeholder
// for its next argument: "type = ph AND queue = ph AND rate_key = ph" for what h's rule names,
// in a "NOT (...)" (FALSE when the rule counts every job in one bucket).
func RateExclusion(h ratelimit.Hold, ph func(any) string) string {
	var conds []string
	if h.Rule.Type != "" {
		conds = append(conds, "type = "+ph(h.Rule.Type))
	}
	if h.Rule.Queue != "" {
		conds = append(conds, "queue = "+ph(h.Rule.Queue))
	}
	if h.Rule.Key != "" {
		conds = append(conds, "rate_key = "+ph(h.Key))
	}
	if len(conds) == 0 {
		return " AND FALSE"
	}
	return " AND NOT (" + strings.Join(conds, " AND ") + ")"
}
