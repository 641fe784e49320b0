package store

import (
	"context"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
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

// JobBuckets lists, each once, the buckets of g's rules that jobs count in and g has not read
// yet, marking them known (a bucket never stored is the zero Bucket) for the store to read
// over; nil when g is nil.
func JobBuckets(g *ratelimit.Gate, jobs []*job.Job) []ratelimit.BucketKey {
	if g == nil {
		return nil
	}
	var out []ratelimit.BucketKey
	for _, j := range jobs {
		out = needBuckets(g, out, j.Type, j.Queue, j.RateKey)
	}
	return out
}

// CandidateBuckets is JobBuckets for the candidates of a keyed lease.
func CandidateBuckets(g *ratelimit.Gate, cands []KeyedCandidate) []ratelimit.BucketKey {
	if g == nil {
		return nil
	}
	var out []ratelimit.BucketKey
	for i := range cands {
		out = needBuckets(g, out, cands[i].Type, cands[i].Queue, cands[i].RateKey)
	}
	return out
}

// needBuckets appends to out the buckets a job of typ in queue with rate key key counts in
// that g does not know, and marks them known.
func needBuckets(g *ratelimit.Gate, out []ratelimit.BucketKey, typ, queue, key string) []ratelimit.BucketKey {
	for _, k := range g.Needs(typ, queue, key) {
		g.Set(k, ratelimit.Bucket{})
		out = append(out, k)
	}
	return out
}
