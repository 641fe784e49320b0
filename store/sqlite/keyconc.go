package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Concurrency per key (store/keyconc.go). The broker alone writes this file, one transaction
// at a time, so a lease counts a key's held jobs without a lock.

// setKeys writes the concurrency keys of the jobs of ps just inserted (out).
func (t *tx) setKeys(ps []*store.JobInsertParams, out []store.JobInsertResult) error {
	keyed, err := store.Keyed(ps, out)
	if err != nil {
		return err
	}
	for _, i := range keyed {
		c := ps[i].Concurrency
		if _, err := t.exec(`UPDATE jobs SET concurrency_key = ?, concurrency_limit = ?, concurrency_rule = ? WHERE id = ?`,
			c.Key, c.Limit, c.Rule, out[i].ID); err != nil {
			return err
		}
	}
	return nil
}

// keyedQuery selects the ready jobs a lease that honours keys may take, in fair order
// (dispatchrule.FairOrder), leaving out keys already at their limit: the keyed jobs ranked
// round-robin by key within each priority, and the first limit jobs without a key, each a key
// of its own.
func keyedQuery(p *store.JobLeaseParams) (string, []any) {
	limit := strconv.Itoa(p.Limit)
	var sb strings.Builder
	sb.WriteString(`SELECT id, queue, concurrency_key, concurrency_limit, held, size, type, rate_key FROM (
		SELECT id, queue, priority, run_at, concurrency_key, concurrency_limit, size, turn + held AS turn, held,
			coalesce((SELECT served FROM concurrency_turns t WHERE t.concurrency_key = r.concurrency_key), 0) AS served,
			type, rate_key
		FROM (
			SELECT id, queue, priority, run_at, concurrency_key, concurrency_limit, length(payload) AS size,
				row_number() OVER (PARTITION BY concurrency_key, priority ORDER BY run_at, id) AS turn,
				(SELECT count(*) FROM jobs h WHERE h.state BETWEEN 3 AND 4 AND h.concurrency_key <> ''
					AND h.concurrency_key = jobs.concurrency_key) AS held, type, rate_key
			FROM jobs WHERE state = 2 AND concurrency_key <> ''`)
	args := leaseWhere(&sb, nil, p)
	sb.WriteString(`) r WHERE held < concurrency_limit
		UNION ALL SELECT * FROM (
			SELECT id, queue, priority, run_at, '', 0, length(payload), 1, 0, 0, type, rate_key
			FROM jobs WHERE ` + openState + ` AND state = 2 AND concurrency_key = ''`)
	args = leaseWhere(&sb, args, p)
	sb.WriteString(` ORDER BY priority DESC, run_at, id LIMIT ` + limit + `))
		ORDER BY priority DESC, turn, served, run_at, id LIMIT ` + limit)
	return sb.String(), args
}

// leaseKeyed leases what p (its scope, the queues' rules applied) asks for when concurrency
// keys are honoured. Each pass reads candidates in fair order, picks those their key's and
// queue's room, and then the rate limits, allow (store.PickKeyed), and leases them, so the
// next pass counts them as held; a capped queue whose room ran out drops out of the next, and
// so do the jobs of a rate limit's bucket that held one back.
func (t *tx) leaseKeyed(p *store.JobLeaseParams, caps map[string]int) ([]*job.Job, error) {
	gate, err := t.rateGate(p)
	if err != nil {
		return nil, err
	}
	scope := *p
	var leased []*job.Job
	bytes := 0
	for len(leased) < p.Limit {
		scope.Limit = p.Limit - len(leased)
		cands, err := t.keyedCandidates(&scope)
		if err != nil {
			return nil, err
		}
		if err := t.rateLoad(gate, store.CandidateBuckets(gate, cands)); err != nil {
			return nil, err
		}
		pick := store.PickKeyed(cands, caps, scope.Limit, p.MaxBytes, bytes, nil, gate)
		jobs, err := t.leaseIDs(p, pick.IDs)
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
		// Held jobs read in place of others: read again without their buckets, unless every
		// candidate was read already.
		held := len(pick.Held) > 0 && len(cands) == scope.Limit
		if held {
			scope.ExcludeRated = append(slices.Clone(scope.ExcludeRated), pick.Held...)
		}
		if pick.Full != "" && !scope.DropQueue(pick.Full) || pick.Full == "" && !held {
			break
		}
	}
	return leased, t.rateSave(gate, p.Rates)
}

// served records that the keys of jobs had a job leased at now.
func (t *tx) served(jobs []*job.Job, now time.Time) error {
	for _, key := range store.KeysOf(jobs) {
		if _, err := t.exec(`INSERT INTO concurrency_turns (concurrency_key, served) VALUES (?, ?)
			ON CONFLICT (concurrency_key) DO UPDATE SET served = excluded.served`, key, nanos(now)); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) keyedCandidates(p *store.JobLeaseParams) ([]store.KeyedCandidate, error) {
	q, args := keyedQuery(p)
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, store.ScanKeyedCandidate)
}

// leaseIDs leases the ready jobs ids, in that order, as JobLease does.
func (t *tx) leaseIDs(p *store.JobLeaseParams, ids []int64) ([]*job.Job, error) {
	out := make([]*job.Job, 0, len(ids))
	until := nanos(p.LeaseUntil)
	for _, id := range ids {
		js, err := t.queryJobs(`SELECT `+jobColumns+` FROM jobs WHERE id = ? AND state = 2`, id)
		if err != nil {
			return nil, err
		}
		if len(js) != 1 {
			return nil, fmt.Errorf("lease job %d: it changed while being leased", id)
		}
		j := js[0]
		token, err := job.NewLeaseToken(j.LeaseToken.Seq, p.Random)
		if err != nil {
			return nil, err
		}
		if _, err := t.exec(`UPDATE jobs SET state = 3, lease_token = ?, lease_secret = ?, lease_expires_at = ?,
			worker_id = ?, lease_owner = ? WHERE id = ? AND state = 2`,
			token.Seq, token.Secret[:], until, p.WorkerID, p.Owner, id); err != nil {
			return nil, err
		}
		j.State, j.LeaseToken, j.LeaseExpiresAt = job.StateLeased, token, p.LeaseUntil
		j.WorkerID, j.LeaseOwner = p.WorkerID, p.Owner
		out = append(out, j)
	}
	return out, nil
}

func (t *tx) ConcurrencyRuleSave(r store.ConcurrencyRule) error {
	if _, err := t.exec(`INSERT INTO concurrency_rules (name, job_type, queue, key_expr, max_running) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET job_type = excluded.job_type, queue = excluded.queue,
		key_expr = excluded.key_expr, max_running = excluded.max_running`,
		r.Name, r.Type, r.Queue, r.Key, r.MaxRunning); err != nil {
		return err
	}
	_, err := t.exec(`UPDATE jobs SET concurrency_limit = ? WHERE concurrency_rule = ? AND state BETWEEN 1 AND 2`,
		r.MaxRunning, r.Name)
	return err
}

func (t *tx) ConcurrencyRuleDelete(name string) (bool, error) {
	n, err := t.exec(`DELETE FROM concurrency_rules WHERE name = ?`, name)
	if err != nil || n == 0 {
		return false, err
	}
	_, err = t.exec(`UPDATE jobs SET concurrency_key = '', concurrency_limit = 0, concurrency_rule = ''
		WHERE concurrency_rule = ? AND state BETWEEN 1 AND 2`, name)
	return err == nil, err
}

func (s *Store) ConcurrencyRules(ctx context.Context) ([]store.ConcurrencyRule, error) {
	var out []store.ConcurrencyRule
	err := s.read(ctx, "concurrency_rules", func(ctx context.Context) error {
		rows, err := s.r.QueryContext(ctx, `SELECT name, job_type, queue, key_expr, max_running FROM concurrency_rules ORDER BY name`)
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
		err := s.r.QueryRowContext(ctx, `SELECT concurrency_key, concurrency_limit, concurrency_rule,
			(SELECT count(*) FROM jobs h WHERE h.concurrency_key = j.concurrency_key AND h.concurrency_key <> ''
				AND h.state BETWEEN 3 AND 4)
			FROM jobs j WHERE id = ?`, id).Scan(&c.Key, &c.Limit, &c.Rule, &held)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		return err
	})
	return c, held, err
}

// concurrencyStatsSQL counts, per rule, the keys with jobs held or ready, the keys at their
// limit, and the held and ready jobs, from the two keyed indexes.
const concurrencyStatsSQL = `SELECT concurrency_rule, count(*), coalesce(sum(held >= lim), 0), coalesce(sum(held), 0), coalesce(sum(ready), 0)
	FROM (SELECT concurrency_rule, concurrency_key, max(concurrency_limit) AS lim,
		sum(state BETWEEN 3 AND 4) AS held, sum(state = 2) AS ready
		FROM jobs WHERE concurrency_key <> '' AND state BETWEEN 2 AND 4
		GROUP BY concurrency_rule, concurrency_key)
	GROUP BY concurrency_rule ORDER BY concurrency_rule`

func (s *Store) ConcurrencyStats(ctx context.Context) ([]store.ConcurrencyStat, error) {
	var out []store.ConcurrencyStat
	err := s.read(ctx, "concurrency_stats", func(ctx context.Context) error {
		rows, err := s.r.QueryContext(ctx, concurrencyStatsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, store.ScanConcurrencyStat)
		return err
	})
	return out, err
}

func (s *Store) ConcurrencyKeyed(ctx context.Context) (bool, error) {
	var keyed bool
	err := s.read(ctx, "concurrency_keyed", func(ctx context.Context) error {
		return s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND concurrency_key <> '')
			OR EXISTS (SELECT 1 FROM jobs WHERE state BETWEEN 3 AND 4 AND concurrency_key <> '')`).Scan(&keyed)
	})
	return keyed, err
}
