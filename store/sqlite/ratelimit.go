package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// Rate limits (store/ratelimit.go). One broker writes the file, so the limits and buckets need
// no lock: the write transaction is the only one.

func scanRateLimits(rows *sql.Rows, err error) ([]store.RateLimitRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, store.ScanRateLimit)
}

// RateLimitLoadAll reads every rate limit, by name.
func (s *Store) RateLimitLoadAll(ctx context.Context) ([]store.RateLimitRecord, error) {
	var out []store.RateLimitRecord
	err := s.read(ctx, "rate_limit_load", func(ctx context.Context) error {
		var err error
		out, err = scanRateLimits(s.r.QueryContext(ctx, `SELECT `+store.RateLimitColumns+` FROM rate_limits ORDER BY name`))
		return err
	})
	return out, err
}

// RateBucketLoad reads the stored buckets of one limit, by key.
func (s *Store) RateBucketLoad(ctx context.Context, name string) ([]store.RateBucketRecord, error) {
	var out []store.RateBucketRecord
	err := s.read(ctx, "rate_bucket_load", func(ctx context.Context) error {
		rows, err := s.r.QueryContext(ctx, `SELECT key, tat FROM rate_buckets WHERE name = ? ORDER BY key`, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, func(row store.Scanner) (store.RateBucketRecord, error) {
			r := store.RateBucketRecord{Name: name}
			var tat int64
			err := row.Scan(&r.Key, &tat)
			r.TAT = fromNanos(tat)
			return r, err
		})
		return err
	})
	return out, err
}

func (t *tx) RateLimitPut(r store.RateLimitRecord) error {
	_, err := t.exec(`INSERT INTO rate_limits (`+store.RateLimitColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET job_type = excluded.job_type, queue = excluded.queue,
		key = excluded.key, rate = excluded.rate, per_ns = excluded.per_ns, burst = excluded.burst,
		updated_at = excluded.updated_at`,
		r.Name, r.Type, r.Queue, r.Key, r.Rate, int64(r.Per), r.Burst, nanos(r.UpdatedAt))
	return err
}

func (t *tx) RateLimitDelete(name string) (bool, error) {
	n, err := t.exec(`DELETE FROM rate_limits WHERE name = ?`, name)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(`DELETE FROM rate_buckets WHERE name = ?`, name)
	return true, err
}

// rateGate is the gate a lease of p applies: nil when p applies no rate limit, or none is
// stored.
func (t *tx) rateGate(p *store.JobLeaseParams) (*ratelimit.Gate, error) {
	if p.Rates == nil {
		return nil, nil
	}
	recs, err := scanRateLimits(t.query(`SELECT ` + store.RateLimitColumns + ` FROM rate_limits ORDER BY name`))
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return ratelimit.NewGate(store.Rules(recs), p.Now), nil
}

// rateLoad reads into g the buckets ks (store.JobBuckets, store.CandidateBuckets), which g
// takes as never stored until read.
func (t *tx) rateLoad(g *ratelimit.Gate, ks []ratelimit.BucketKey) error {
	for _, k := range ks {
		var tat int64
		err := t.queryRow(`SELECT tat FROM rate_buckets WHERE name = ? AND key = ?`, k.Name, k.Key).Scan(&tat)
		switch {
		case err == sql.ErrNoRows:
		case err != nil:
			return err
		default:
			g.Set(k, ratelimit.Bucket{TAT: fromNanos(tat)})
		}
	}
	return nil
}

// rateSave writes back the buckets g took from, and tells r when a job g held back may go.
func (t *tx) rateSave(g *ratelimit.Gate, r *store.RateLease) error {
	if g == nil {
		return nil
	}
	r.Held(g.NextAt())
	for _, b := range g.Changed() {
		if _, err := t.exec(`INSERT INTO rate_buckets (name, key, tat) VALUES (?, ?, ?)
			ON CONFLICT (name, key) DO UPDATE SET tat = excluded.tat`, b.Name, b.Key, nanos(b.TAT)); err != nil {
			return err
		}
	}
	return nil
}

// rateExcluded appends the conditions that leave out the buckets p found empty.
func rateExcluded(q *strings.Builder, args []any, p *store.JobLeaseParams) []any {
	for _, h := range p.ExcludeRated {
		q.WriteString(store.RateExclusion(h, func(v any) string { args = append(args, v); return "?" }))
	}
	return args
}

// rateCountsOffer leaves an offered job PENDING when a rate limit counts it (arguments: its type,
// its queue): an offer takes no allowance, so a round must lease it.
const rateCountsOffer = `
			AND NOT EXISTS (SELECT 1 FROM rate_limits WHERE (job_type = '' OR job_type = ?) AND (queue = '' OR queue = ?))`
