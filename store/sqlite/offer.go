package sqlite

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
	"github.com/jobwire/jobwire/store"
)

// offerRulesSQL is the end of offerFreeSQL's statement (arguments: the job's queue, type, type,
// queue): its queue is neither paused nor capped, no breaker of its type is shut and no rate
// limit counts it.
const offerRulesSQL = `
	AND NOT EXISTS (SELECT 1 FROM queues WHERE name = ? AND (paused OR concurrency_limit > 0))
	AND NOT EXISTS (SELECT 1 FROM breakers WHERE type = ? AND shut)` + rateCountsOffer

// offerFreeSQL answers whether a job offered with its insert may be stored LEASED, and its
// arguments: no ready job the offer's worker could take waits ahead of it, and offerRulesSQL.
// It runs before the call's jobs are inserted, so only the jobs stored before the call count,
// as store.Tx.JobInsertOfferedAtCommit says. The worker's jobs are read as a lease of it reads
// them (store.PlanReads), so that jobs waiting in a queue it does not take, or of a type it
// does not handle (a backlog nobody serves), keep no offer back. An offer that does not name
// the worker's types counts every ready job.
//
// A job waits ahead when it has at least the offered job's priority and its queue is not
// paused, among the first store.PausedBacklogMin of the read's jobs at that priority or above;
// or when that many are there at all. A paused queue's jobs do not wait for a worker, and a
// job of the same type held there kept every offer back, each job then waiting for a
// dispatch round; they are passed over only while few (a broker offers nothing while the
// paused queues hold more, JobLeaseParams.PausedBacklog), since each is read to be passed.
//
// types are the worker's types as a lease of it reads them: o.Types, or those of them with a
// ready job where a lease narrows them (store.NarrowsTypes); none left, nothing waits ahead.
func offerFreeSQL(p *store.JobInsertParams, o *store.JobOffer, types []string) (string, []any) {
	rules := []any{p.Queue, p.Type, p.Type, p.Queue}
	if store.NarrowsTypes(o.Types) && len(types) == 0 {
		return `SELECT 1` + offerRulesSQL, rules
	}
	var q strings.Builder
	var args []any
	switch store.PlanReads(o.Queues, types) {
	case store.ReadByQueueAndType:
		q.WriteString(`FROM jobs INDEXED BY jobs_ready_queue_type WHERE state = 2`)
		args = in(&q, in(&q, nil, "queue", false, o.Queues), "type", false, types)
	case store.ReadByType:
		q.WriteString(`FROM jobs INDEXED BY jobs_ready_type WHERE state = 2`)
		args = in(&q, in(&q, nil, "type", false, types), "queue", false, o.Queues)
	default:
		q.WriteString(`FROM jobs WHERE ` + openState + ` AND state = 2`)
	}
	read := q.String() + ` AND priority >= ? LIMIT ` + strconv.Itoa(store.PausedBacklogMin)
	args = append(args, p.Priority)
	sql := `SELECT NOT EXISTS (SELECT 1 FROM (SELECT queue ` + read + `) AS h
			WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = h.queue AND paused))
		AND (SELECT count(*) FROM (SELECT 1 ` + read + `)) < ` + strconv.Itoa(store.PausedBacklogMin) + offerRulesSQL
	return sql, append(append(args, args...), rules...)
}

// insertLeasedSQL stores one offered job LEASED, with its first token.
const insertLeasedSQL = `INSERT INTO jobs (type, queue, payload, priority, state, max_attempts, run_at,
	created_at, attempt_timeout_ns, metadata, rate_key, lease_token, lease_secret, lease_expires_at, worker_id,
	lease_owner) VALUES (?, ?, ?, ?, 3, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// JobInsertOfferedAtCommit stores each offered job that may go ahead (offerFreeSQL) LEASED by
// its insert, and the others as JobInsertMany does, in the call's order. A job inserted leased
// is one row written once: leasing it after a PENDING insert would move it between the ready
// and the held indexes and read it back, two more writes of the row and a read, which cost
// more than its insert. A statement costs no round trip here, so the jobs are handed to got
// at once. The results say PENDING for every job stored, leased or not, as on PostgreSQL: the
// lease is got's to report.
func (t *tx) JobInsertOfferedAtCommit(ps []*store.JobInsertParams, offers []*store.JobOffer, got func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	if err := store.CheckOffers(ps, offers); err != nil {
		return nil, err
	}
	free, err := t.offersFree(ps, offers)
	if err != nil {
		return nil, err
	}
	out := make([]store.JobInsertResult, len(ps))
	leased := make([]*job.Job, len(ps))
	from := 0 // the first job not stored yet
	pending := func(to int) error {
		if from == to {
			return nil
		}
		rs, err := t.JobInsertMany(ps[from:to])
		if err != nil {
			return err
		}
		copy(out[from:to], rs)
		return nil
	}
	for i, ok := range free {
		if !ok {
			continue
		}
		if err := pending(i); err != nil {
			return nil, err
		}
		j, err := t.insertLeased(ps[i], offers[i])
		if err != nil {
			return nil, err
		}
		leased[i] = j
		out[i] = store.JobInsertResult{ID: j.ID, State: job.StatePending, RunAt: ps[i].RunAt}
		from = i + 1
	}
	if err := pending(len(ps)); err != nil {
		return nil, err
	}
	got(leased, nil)
	return out, nil
}

// offersFree reports, per job of ps, whether its offer may lease it (offerFreeSQL). Nothing is
// inserted while it asks, so jobs of one priority, queue and type offered to workers of the
// same queues and types share one answer.
func (t *tx) offersFree(ps []*store.JobInsertParams, offers []*store.JobOffer) ([]bool, error) {
	type kind struct {
		priority                  int
		queue, typ, queues, types string
	}
	var answers map[kind]bool
	free := make([]bool, len(ps))
	for i, o := range offers {
		if o == nil {
			continue
		}
		p := ps[i]
		k := kind{p.Priority, p.Queue, p.Type, strings.Join(o.Queues, ","), strings.Join(o.Types, ",")} // names hold no comma
		ok, asked := answers[k]
		if !asked {
			types := o.Types
			if store.NarrowsTypes(types) {
				var err error
				if types, err = t.readyTypes(types); err != nil {
					return nil, err
				}
			}
			q, args := offerFreeSQL(p, o, types)
			if err := t.queryRow(q, args...).Scan(&ok); err != nil {
				return nil, err
			}
			if answers == nil {
				answers = make(map[kind]bool)
			}
			answers[k] = ok
		}
		free[i] = ok
	}
	return free, nil
}

// insertLeased stores p LEASED to o and returns the job as a read of its row would.
func (t *tx) insertLeased(p *store.JobInsertParams, o *store.JobOffer) (*job.Job, error) {
	token, err := job.NewLeaseToken(0, o.Random)
	if err != nil {
		return nil, err
	}
	payload, meta, err := rowValues(p)
	if err != nil {
		return nil, err
	}
	res, err := t.execResult(insertLeasedSQL, p.Type, p.Queue, payload, p.Priority, p.MaxAttempts,
		nanos(p.RunAt), nanos(p.Now), int64(p.AttemptTimeout), meta, p.RateKey,
		token.Seq, token.Secret[:], nanos(o.LeaseUntil), o.WorkerID, o.Owner)
	if err != nil {
		return nil, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("offered job's id: %w", err)
	}
	if err := t.ensureQueue(p.Queue); err != nil {
		return nil, err
	}
	j := &job.Job{ID: id, Type: p.Type, Queue: p.Queue, Payload: payload, Priority: p.Priority,
		State: job.StateLeased, MaxAttempts: p.MaxAttempts, RunAt: fromNanos(nanos(p.RunAt)),
		CreatedAt: fromNanos(nanos(p.Now)), AttemptTimeout: p.AttemptTimeout, LeaseToken: token,
		LeaseExpiresAt: fromNanos(nanos(o.LeaseUntil)), WorkerID: o.WorkerID, LeaseOwner: o.Owner,
		RateKey: p.RateKey, UniqueStates: unique.Mask(0).States()}
	if len(p.Metadata) > 0 {
		j.Metadata = maps.Clone(p.Metadata)
	}
	return j, nil
}
