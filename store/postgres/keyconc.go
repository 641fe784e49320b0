package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// Concurrency per key (store/keyconc.go), enforced by the database for every broker that
// shares it.
//
// A key's room is the job's limit less the key's LEASED and RUNNING jobs, counted after taking
// one transaction-level advisory lock, the keys' lock: a second transaction that wants to lease
// keyed jobs waits for the first to commit and then counts the jobs the first leased (each
// statement of a READ COMMITTED transaction sees what committed before it started). One lock
// for every key, not one per key: a lease reads many keys at once, and a lock per key would
// have to be taken in one order across transactions that discover their keys as they read.
// It is the last in the lock order (lockorder.go): after the capped queues' rows, which a lease
// locks first (leaseScope); while holding it a lease waits for no row (its reads of jobs skip
// locked rows), so it closes no cycle. A lease that does not honour keys leaves keyed jobs out
// (leaseQuery), so it needs no lock: the hot path of jobs without keys is unchanged.

// setKeys writes the concurrency keys of the jobs of ps just inserted (out), one statement for
// them all. The rows are new: no other transaction sees them yet.
func (t *tx) setKeys(ps []*store.JobInsertParams, out []store.JobInsertResult) error {
	idx, err := store.Keyed(ps, out)
	if err != nil || len(idx) == 0 {
		return err
	}
	ids, keys, limits, rules := make([]int64, len(idx)), make([]string, len(idx)), make([]int32, len(idx)), make([]string, len(idx))
	for k, i := range idx {
		c := ps[i].Concurrency
		ids[k], keys[k], limits[k], rules[k] = out[i].ID, c.Key, int32(c.Limit), c.Rule
	}
	return t.hold(`UPDATE jobs SET concurrency_key = u.k, concurrency_limit = u.l, concurrency_rule = u.r
		FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::text[]) AS u(id, k, l, r) WHERE jobs.id = u.id`,
		ids, keys, limits, rules)
}

// lockKeys takes the keys' lock, once per transaction.
func (t *tx) lockKeys() error {
	if t.keysLocked {
		return nil
	}
	if err := t.flushFinished(); err != nil { // the totals' rows come before the lock
		return err
	}
	if _, err := t.exec(`SELECT pg_advisory_xact_lock($1, `+schemaKey+`)`, lockConcurrency); err != nil {
		return err
	}
	t.keysLocked = true
	return nil
}

// keyedQuery selects the ready jobs a lease that honours keys may take, in fair order
// (dispatchrule.FairOrder), leaving out keys already at their limit: the keyed jobs ranked
// round-robin by key within each priority, and the first limit jobs without a key, each a key
// of its own. skip are jobs passed over already.
func keyedQuery(p *store.JobLeaseParams, skip []int64) *query {
	q := &query{}
	notSkipped := func() {
		if len(skip) > 0 {
			q.sql.WriteString(` AND NOT (id = ANY(` + q.arg(skip) + `))`)
		}
	}
	q.sql.WriteString(`SELECT id, queue, concurrency_key, concurrency_limit, held, size, type, rate_key FROM (
		SELECT r.id, r.queue, r.priority, r.run_at, r.concurrency_key, r.concurrency_limit, r.size, r.turn + h.n AS turn,
			h.n AS held, coalesce(t.served, 0) AS served, r.type, r.rate_key FROM (
			SELECT id, queue, priority, run_at, concurrency_key, concurrency_limit, octet_length(payload) AS size,
				row_number() OVER (PARTITION BY concurrency_key, priority ORDER BY run_at, id) AS turn, type, rate_key
			FROM jobs WHERE state = 2 AND concurrency_key <> ''`)
	leaseWhere(q, p)
	notSkipped()
	q.sql.WriteString(`) r CROSS JOIN LATERAL (SELECT count(*) AS n FROM jobs h
			WHERE h.state IN (3, 4) AND h.concurrency_key <> '' AND h.concurrency_key = r.concurrency_key) h
		LEFT JOIN concurrency_turns t ON t.concurrency_key = r.concurrency_key
		WHERE h.n < r.concurrency_limit
		UNION ALL (
			SELECT id, queue, priority, run_at, '', 0, octet_length(payload), 1::bigint, 0::bigint, 0::bigint,
				type, rate_key
			FROM jobs WHERE state = 2 AND concurrency_key = ''`)
	leaseWhere(q, p)
	notSkipped()
	limit := q.arg(p.Limit)
	q.sql.WriteString(` ORDER BY priority DESC, run_at, id LIMIT ` + limit + `)
	) c ORDER BY priority DESC, turn, served, run_at, id LIMIT ` + limit)
	return q
}

// leaseKeyed leases what p (its scope, the queues' rules applied) asks for when concurrency
// keys are honoured, under the keys' lock, and the rate limits' locks first when p applies
// them (the lock order, lockorder.go). Each pass reads candidates in fair order, locks them
// (SKIP LOCKED: a row another transaction holds is someone else's), picks those their key's
// and queue's room, and then the rate limits, allow (store.PickKeyed) and leases them, so that
// the next pass counts them as held; a capped queue whose room ran out, the rows found locked,
// and the jobs of a rate limit's bucket that held one back drop out of it.
func (t *tx) leaseKeyed(p *store.JobLeaseParams, caps map[string]int) ([]*job.Job, error) {
	gate, err := t.rateGate(p)
	if err != nil {
		return nil, err
	}
	if err := t.lockKeys(); err != nil {
		return nil, err
	}
	leased, err := t.leaseKeyedPasses(p, caps, gate)
	if err != nil {
		return nil, err
	}
	// Only holders of the limits' locks write the buckets: this waits for no row.
	return leased, t.rateSave(gate, p.Rates)
}

// leaseKeyedPasses runs leaseKeyed's passes, admitting the candidates through gate (nil for no
// rate limit).
func (t *tx) leaseKeyedPasses(p *store.JobLeaseParams, caps map[string]int, gate *ratelimit.Gate) ([]*job.Job, error) {
	scope := *p
	var leased []*job.Job
	var skip []int64
	bytes := 0
	for len(leased) < p.Limit {
		scope.Limit = p.Limit - len(leased)
		cands, err := t.keyedCandidates(keyedQuery(&scope, skip))
		if err != nil || len(cands) == 0 {
			return leased, err
		}
		ids := make([]int64, len(cands))
		for i, c := range cands {
			ids[i] = c.ID
		}
		rows, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = ANY($1) AND state = 2
			ORDER BY id FOR UPDATE SKIP LOCKED`, ids)
		if err != nil {
			return nil, err
		}
		if err := t.rateLoad(gate, store.CandidateBuckets(gate, cands)); err != nil {
			return nil, err
		}
		byID := make(map[int64]*job.Job, len(rows))
		for _, j := range rows {
			byID[j.ID] = j
		}
		skipped := len(skip)
		pick := store.PickKeyed(cands, caps, scope.Limit, p.MaxBytes, bytes, func(id int64) bool {
			if byID[id] == nil {
				skip = append(skip, id)
				return true
			}
			return false
		}, gate)
		jobs, err := t.leasePicked(p, pick.IDs, byID)
		if err != nil {
			return nil, err
		}
		store.MarkKeys(jobs, cands)
		if err := t.served(jobs, p.Now); err != nil {
			return nil, err
		}
		leased = append(leased, jobs...)
		bytes += pick.Bytes
		if p.MaxBytes > 0 && bytes >= p.MaxBytes {
			break
		}
		// Jobs passed over, locked or held back by a rate limit, were read in place of others:
		// read again without them, unless every candidate was read already.
		cut := len(cands) == scope.Limit
		held := len(pick.Held) > 0 && cut
		if held {
			scope.ExcludeRated = append(slices.Clone(scope.ExcludeRated), pick.Held...)
		}
		more := held || len(skip) > skipped && cut
		if pick.Full == "" && !more {
			break
		}
		if pick.Full != "" && !scope.DropQueue(pick.Full) {
			break
		}
	}
	return leased, nil
}

// served records that the keys of jobs had a job leased at now. Only a lease holding the
// keys' lock writes these rows.
func (t *tx) served(jobs []*job.Job, now time.Time) error {
	keys := store.KeysOf(jobs)
	if len(keys) == 0 {
		return nil
	}
	return t.hold(`INSERT INTO concurrency_turns (concurrency_key, served) SELECT k, $2 FROM unnest($1::text[]) AS k
		ON CONFLICT (concurrency_key) DO UPDATE SET served = excluded.served`, keys, nanos(now))
}

func (t *tx) keyedCandidates(q *query) ([]store.KeyedCandidate, error) {
	rows, err := t.tx.Query(t.ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, store.ScanKeyedCandidate)
}

// leasePicked leases the jobs ids, locked and read as byID, in the order of ids.
func (t *tx) leasePicked(p *store.JobLeaseParams, ids []int64, byID map[int64]*job.Job) ([]*job.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]*job.Job, len(ids))
	seqs, secrets := make([]int64, len(ids)), make([][]byte, len(ids))
	for i, id := range ids {
		j := byID[id]
		token, err := job.NewLeaseToken(j.LeaseToken.Seq, p.Random)
		if err != nil {
			return nil, err
		}
		j.State, j.LeaseToken, j.LeaseExpiresAt = job.StateLeased, token, p.LeaseUntil
		j.WorkerID, j.LeaseOwner = p.WorkerID, p.Owner
		out[i], seqs[i], secrets[i] = j, token.Seq, token.Secret[:]
	}
	n, err := t.exec(leaseSQL, ids, seqs, secrets, nanos(p.LeaseUntil), p.WorkerID, p.Owner)
	if err != nil {
		return nil, err
	}
	if int(n) != len(ids) {
		// The rows are locked by this transaction since the read: nothing else can change them.
		return nil, fmt.Errorf("leased %d of %d keyed jobs: they changed while being leased", n, len(ids))
	}
	return out, nil
}

func (t *tx) ConcurrencyRuleSave(r store.ConcurrencyRule) error {
	if _, err := t.exec(`INSERT INTO concurrency_rules (name, job_type, queue, key_expr, max_running) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET job_type = excluded.job_type, queue = excluded.queue,
		key_expr = excluded.key_expr, max_running = excluded.max_running`,
		r.Name, r.Type, r.Queue, r.Key, r.MaxRunning); err != nil {
		return err
	}
	// The waiting jobs are locked in id order (lockorder.go) before they change.
	_, err := t.exec(`WITH c AS (SELECT id FROM jobs WHERE concurrency_rule = $2 AND state IN (1, 2)
			ORDER BY id FOR NO KEY UPDATE)
		UPDATE jobs SET concurrency_limit = $1 FROM c
		WHERE jobs.id = c.id AND jobs.concurrency_rule = $2 AND jobs.state IN (1, 2)`, r.MaxRunning, r.Name)
	return err
}

func (t *tx) ConcurrencyRuleDelete(name string) (bool, error) {
	n, err := t.exec(`DELETE FROM concurrency_rules WHERE name = $1`, name)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(`WITH c AS (SELECT id FROM jobs WHERE concurrency_rule = $1 AND state IN (1, 2)
			ORDER BY id FOR NO KEY UPDATE)
		UPDATE jobs SET concurrency_key = '', concurrency_limit = 0, concurrency_rule = '' FROM c
		WHERE jobs.id = c.id AND jobs.concurrency_rule = $1 AND jobs.state IN (1, 2)`, name)
	return err == nil, err
}

func (s *Store) ConcurrencyRules(ctx context.Context) ([]store.ConcurrencyRule, error) {
	var out []store.ConcurrencyRule
	err := s.read(ctx, "concurrency_rules", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT name, job_type, queue, key_expr, max_running FROM concurrency_rules ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, store.ScanConcurrencyRule)
		return err
	})
	return out, err
}

func (s *Store) ConcurrencyOfJob(ctx context.Context, id int64) (store.Concurrency, int, error) {
	var c store.Concurrency
	var held int
	err := s.read(ctx, "concurrency_of_job", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `SELECT concurrency_key, concurrency_limit, concurrency_rule,
			(SELECT count(*) FROM jobs h WHERE h.state IN (3, 4) AND h.concurrency_key <> ''
				AND h.concurrency_key = j.concurrency_key)
			FROM jobs j WHERE id = $1`, id).Scan(&c.Key, &c.Limit, &c.Rule, &held)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		return err
	})
	return c, held, err
}

// concurrencyStatsSQL counts, per rule, the keys with jobs held or ready, the keys at their
// limit, and the held and ready jobs. It reads the keyed jobs through jobs_ready_keyed and
// jobs_held_keyed, a query each (no index answers state IN (2, 3, 4)), and is planned at each
// call, as the stats reads are (see jobCountsSQL).
const concurrencyStatsSQL = `SELECT concurrency_rule, count(*), count(*) FILTER (WHERE held >= lim), coalesce(sum(held), 0),
		coalesce(sum(ready), 0)
	FROM (SELECT concurrency_rule, concurrency_key, max(concurrency_limit) AS lim,
		count(*) FILTER (WHERE state IN (3, 4)) AS held, count(*) FILTER (WHERE state = 2) AS ready
		FROM (SELECT concurrency_rule, concurrency_key, concurrency_limit, state FROM jobs
				WHERE state = 2 AND concurrency_key <> ''
			UNION ALL SELECT concurrency_rule, concurrency_key, concurrency_limit, state FROM jobs
				WHERE state IN (3, 4) AND concurrency_key <> '') j
		GROUP BY concurrency_rule, concurrency_key) k
	GROUP BY concurrency_rule ORDER BY concurrency_rule`

func (s *Store) ConcurrencyStats(ctx context.Context) ([]store.ConcurrencyStat, error) {
	var out []store.ConcurrencyStat
	err := s.read(ctx, "concurrency_stats", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, concurrencyStatsSQL, pgx.QueryExecModeExec)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, store.ScanConcurrencyStat)
		return err
	})
	return out, err
}

// ConcurrencyKeyed is planned at each call (pgx.QueryExecModeExec: an unnamed statement), not
// once per connection: the broker asks every poll, from its start, when the jobs table may be
// empty, and a plan kept from then read the whole table (the partial indexes jobs_ready_keyed
// and jobs_held_keyed answer in microseconds). Beside a million waiting jobs, before the table
// was analysed, the kept plan took 90 ms a call and up to 780 ms (pg_stat_statements).
func (s *Store) ConcurrencyKeyed(ctx context.Context) (bool, error) {
	var keyed bool
	err := s.read(ctx, "concurrency_keyed", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, concurrencyKeyedSQL, pgx.QueryExecModeExec).Scan(&keyed)
	})
	return keyed, err
}

const concurrencyKeyedSQL = `SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND concurrency_key <> '')
	OR EXISTS (SELECT 1 FROM jobs WHERE state IN (3, 4) AND concurrency_key <> '')`
