package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// Rate limits (store/ratelimit.go), shared by every broker of the database. A lease that
// applies them locks every limit's row first, in name order (rateLocksSQL: the fifth step of
// the lock order, lockorder.go), then reads and writes the buckets its jobs count in: a second
// broker's lease waits for the first to commit and then reads the buckets the first wrote, so
// no allowance is spent twice. A bucket is written only under its limit's lock; a change or
// removal of a limit takes the same lock by writing its row.

// rateLocksSQL reads and locks every limit, in name order.
const rateLocksSQL = `SELECT ` + store.RateLimitColumns + ` FROM rate_limits ORDER BY name FOR UPDATE`

func scanRateLimits(rows pgx.Rows, err error) ([]store.RateLimitRecord, error) {
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
		out, err = scanRateLimits(s.pool.Query(ctx, `SELECT `+store.RateLimitColumns+` FROM rate_limits ORDER BY name`))
		return err
	})
	return out, err
}

// RateBucketLoad reads the stored buckets of one limit, by key.
func (s *Store) RateBucketLoad(ctx context.Context, name string) ([]store.RateBucketRecord, error) {
	var out []store.RateBucketRecord
	err := s.read(ctx, "rate_bucket_load", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT key, tat FROM rate_buckets WHERE name = $1 ORDER BY key`, name)
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
	if err := t.rateChanging(); err != nil {
		return err
	}
	_, err := t.exec(`INSERT INTO rate_limits (`+store.RateLimitColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (name) DO UPDATE SET job_type = excluded.job_type, queue = excluded.queue,
		key = excluded.key, rate = excluded.rate, per_ns = excluded.per_ns, burst = excluded.burst,
		updated_at = excluded.updated_at`,
		r.Name, r.Type, r.Queue, r.Key, r.Rate, int64(r.Per), r.Burst, nanos(r.UpdatedAt))
	return err
}

func (t *tx) RateLimitDelete(name string) (bool, error) {
	if err := t.rateChanging(); err != nil {
		return false, err
	}
	n, err := t.exec(`DELETE FROM rate_limits WHERE name = $1`, name)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(`DELETE FROM rate_buckets WHERE name = $1`, name)
	return true, err
}

// rateChanging takes, before a change of a limit, the locks a lease of the same transaction
// takes after it, in the lock order: the capped queues', then every limit's. Taking only the
// changed limit's row, a change and a lease in one transaction would lock that row before the
// others while another broker's lease locks them all in name order.
func (t *tx) rateChanging() error {
	if err := t.lockCappedQueues(); err != nil {
		return err
	}
	rows, err := t.tx.Query(t.ctx, rateLocksSQL)
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// rateGate locks the limits and returns the gate a lease of p applies: nil when p applies no
// rate limit, or none is stored.
func (t *tx) rateGate(p *store.JobLeaseParams) (*ratelimit.Gate, error) {
	if p.Rates == nil {
		return nil, nil
	}
	if err := t.flushFinished(); err != nil { // the totals' rows come before the limits'
		return nil, err
	}
	recs, err := scanRateLimits(t.tx.Query(t.ctx, rateLocksSQL))
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return ratelimit.NewGate(store.Rules(recs), p.Now), nil
}

// rateLoad reads into g, with one statement, the buckets ks (store.JobBuckets,
// store.CandidateBuckets), which g takes as never stored until read.
func (t *tx) rateLoad(g *ratelimit.Gate, ks []ratelimit.BucketKey) error {
	if len(ks) == 0 {
		return nil
	}
	names, keys := make([]string, len(ks)), make([]string, len(ks))
	for i, k := range ks {
		names[i], keys[i] = k.Name, k.Key
	}
	rows, err := t.tx.Query(t.ctx, `SELECT b.name, b.key, b.tat FROM rate_buckets b
		JOIN unnest($1::text[], $2::text[]) AS u(name, key) ON b.name = u.name AND b.key = u.key`, names, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k ratelimit.BucketKey
		var tat int64
		if err := rows.Scan(&k.Name, &k.Key, &tat); err != nil {
			return err
		}
		g.Set(k, ratelimit.Bucket{TAT: fromNanos(tat)})
	}
	return rows.Err()
}

// rateSave writes back the buckets g took from, and tells r when a job g held back may go.
func (t *tx) rateSave(g *ratelimit.Gate, r *store.RateLease) error {
	if g == nil {
		return nil
	}
	r.Held(g.NextAt())
	changed := g.Changed()
	if len(changed) == 0 {
		return nil
	}
	names, keys, tats := make([]string, len(changed)), make([]string, len(changed)), make([]int64, len(changed))
	for i, b := range changed {
		names[i], keys[i], tats[i] = b.Name, b.Key, nanos(b.TAT)
	}
	return t.hold(`INSERT INTO rate_buckets (name, key, tat)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
		ON CONFLICT (name, key) DO UPDATE SET tat = excluded.tat`, names, keys, tats)
}

// rateCountsOffer leaves an offered job PENDING when a rate limit counts it: an offer takes no
// allowance, so a round must lease it.
const rateCountsOffer = `
			AND NOT EXISTS (SELECT 1 FROM rate_limits rl WHERE (rl.job_type = '' OR rl.job_type = u.type)
				AND (rl.queue = '' OR rl.queue = u.queue))`
