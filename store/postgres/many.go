package postgres

import (
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// leaseArrays splits leases into the arrays a statement joins on (unnest): ids, token
// sequence numbers and token secrets.
func leaseArrays(n int, ref func(i int) job.LeaseRef) (ids, seqs []int64, secrets [][]byte) {
	ids, seqs, secrets = make([]int64, n), make([]int64, n), make([][]byte, n)
	for i := range n {
		r := ref(i)
		ids[i], seqs[i], secrets[i] = r.JobID, r.Token.Seq, r.Token.Secret[:]
	}
	return ids, seqs, secrets
}

// The writes of many leases at once (see joinByKey). Each joins the arrays of its leases (ids,
// token numbers, token secrets, then per-lease values) to jobs, is fenced by the leases, and
// returns the leases it changed.
const (
	startManySQL = `UPDATE jobs SET state = 4, attempts = attempts + 1, started_at = u.now,
	lease_expires_at = u.until, attempt_deadline = u.deadline
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bigint[], $5::bigint[], $6::bigint[])
		AS u(id, seq, secret, now, until, deadline)
	WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 = 3
		AND jobs.lease_expires_at > u.now
	RETURNING jobs.id, jobs.lease_token, jobs.lease_secret`
	releaseManySQL = `UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = ''
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS u(id, seq, secret)
	WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 = 3
	RETURNING jobs.id, jobs.lease_token, jobs.lease_secret`
)

// JobStartMany starts every current lease of ps with one statement, which returns those it
// changed: the others are checked one by one for a start stored before, as JobStart does.
func (t *tx) JobStartMany(ps []*store.JobStartParams) ([]bool, error) {
	defer t.frontSafe()()
	if len(ps) == 0 {
		return nil, nil
	}
	ids, seqs, secrets := leaseArrays(len(ps), func(i int) job.LeaseRef { return ps[i].Ref })
	now, until, deadline := make([]int64, len(ps)), make([]int64, len(ps)), make([]int64, len(ps))
	for i, p := range ps {
		now[i], until[i], deadline[i] = nanos(p.Now), nanos(p.LeaseUntil), nanos(p.AttemptDeadline)
	}
	changed, err := t.updateLeases(startManySQL, ids, seqs, secrets, now, until, deadline)
	if err != nil {
		return nil, err
	}
	return appliedMany(changed, len(ps), func(i int) job.LeaseRef { return ps[i].Ref }, func(i int) (bool, error) {
		return t.alreadyApplied(ps[i].Ref, job.StateRunning, ps[i].Attempt)
	})
}

// JobReleaseMany releases every current lease of refs with one statement; the others are
// checked one by one for a release stored before, as JobRelease does.
func (t *tx) JobReleaseMany(refs []job.LeaseRef) ([]bool, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ids, seqs, secrets := leaseArrays(len(refs), func(i int) job.LeaseRef { return refs[i] })
	changed, err := t.updateLeases(releaseManySQL, ids, seqs, secrets)
	if err != nil {
		return nil, err
	}
	return appliedMany(changed, len(refs), func(i int) job.LeaseRef { return refs[i] }, func(i int) (bool, error) {
		return t.releasedAlready(refs[i])
	})
}

// updateLeases runs a write of many leases, a statement that joins the arrays of their ids,
// token numbers and secrets (then more, args) to jobs and returns the rows it changed (id,
// lease_token, lease_secret), with the planner held to probing the primary key (joinByKey),
// its jobs locked first in id order (lockLeases), and returns the leases it changed.
func (t *tx) updateLeases(sql string, ids, seqs []int64, secrets [][]byte, args ...any) (map[job.LeaseRef]bool, error) {
	if err := t.joinByKey(true); err != nil {
		return nil, err
	}
	if err := t.lockLeases(ids, seqs, secrets); err != nil {
		return nil, err
	}
	rows, err := t.tx.Query(t.ctx, sql, append([]any{ids, seqs, secrets}, args...)...)
	if err != nil {
		return nil, err
	}
	changed, err := collectRefs(rows)
	if err != nil {
		return nil, err
	}
	return changed, t.joinByKey(false)
}

// appliedMany reports, for each of n leases a write of many was given, whether it was applied:
// changed by the write (in changed, which it empties), or, when not, found already applied by
// repeated (a write run again after its commit). A lease listed twice is applied once and
// reported applied both times.
func appliedMany(changed map[job.LeaseRef]bool, n int, ref func(i int) job.LeaseRef, repeated func(i int) (bool, error)) ([]bool, error) {
	var err error
	applied := make([]bool, n)
	for i := range n {
		r := ref(i)
		if changed[r] {
			applied[i] = true
			delete(changed, r)
			continue
		}
		if applied[i], err = repeated(i); err != nil {
			return nil, err
		}
	}
	return applied, nil
}

// releasedAlready reports whether ref's job shows the release of ref (store.LeaseState.Released).
func (t *tx) releasedAlready(ref job.LeaseRef) (bool, error) {
	ls, err := t.leaseState(ref.JobID)
	return err == nil && ls.Released(ref), err
}
