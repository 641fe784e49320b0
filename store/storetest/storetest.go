// Package storetest is the contract of store.Store, written as tests: every implementation runs
// Run against its own fresh, empty stores and must pass every case. The cases cover each method
// of store.Store and store.Tx through the interface alone, so the SQLite and PostgreSQL stores
// are held to the same behaviour: dispatch order, fencing by lease token, idempotency keys,
// queue caps, the totals behind the stats, retention and API tokens.
//
// A store's own tests keep what only it can check (its SQL plans, its fault classifier, its
// migrations); what the broker relies on belongs here.
package storetest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Opener returns a new, empty store of the implementation under test, which the test owns: Run
// closes it when the test ends. Each call must give a store of its own (its own file, its own
// database or schema), since the cases run in parallel.
type Opener func(t *testing.T) store.Store

// testCase is one case of the contract.
type testCase struct {
	name string
	run  func(t *testing.T, b *bundle)
}

// cases are every case of the contract; each file of the package adds its own.
var cases []testCase

func register(cs ...testCase) bool {
	cases = append(cases, cs...)
	return true
}

// Run runs every case of the contract against stores from open, each case as a parallel
// subtest with a store of its own.
func Run(t *testing.T, open Opener) {
	t.Helper()
	sorted := append([]testCase(nil), cases...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, c := range sorted {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, setup(t, open))
		})
	}
}

// bundle is one case's store and clock.
type bundle struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
	// now is the cases' clock: a whole second, so that every store keeps it exactly.
	now time.Time
}

func setup(t *testing.T, open Opener) *bundle {
	t.Helper()
	s := open(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &bundle{t: t, s: s, ctx: context.Background(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// write runs fn in one write and fails the test if it fails.
func (b *bundle) write(fn func(tx store.Tx) error) {
	b.t.Helper()
	if err := b.s.Write(b.ctx, "storetest", fn); err != nil {
		b.t.Fatal(err)
	}
}

// job is an insert of one PENDING job of type typ in queue "default", due now.
func (b *bundle) job(typ string) *store.JobInsertParams {
	return &store.JobInsertParams{Type: typ, Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
		RunAt: b.now, Now: b.now, AttemptTimeout: time.Minute}
}

// insert adds jobs and returns their ids.
func (b *bundle) insert(ps ...*store.JobInsertParams) []int64 {
	b.t.Helper()
	var res []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertMany(ps)
		return err
	})
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// leaseParams leases up to limit jobs of types for worker "w" with a one-minute lease.
func (b *bundle) leaseParams(limit int, types ...string) *store.JobLeaseParams {
	return &store.JobLeaseParams{Types: types, Limit: limit, WorkerID: "w", Now: b.now, LeaseUntil: b.now.Add(time.Minute)}
}

// lease leases with p and returns the leased jobs.
func (b *bundle) lease(p *store.JobLeaseParams) []*job.Job {
	b.t.Helper()
	var out []*job.Job
	b.write(func(tx store.Tx) error {
		var err error
		out, err = tx.JobLease(p)
		return err
	})
	return out
}

// leaseOne leases the one ready job of type typ.
func (b *bundle) leaseOne(typ string) job.LeaseRef {
	b.t.Helper()
	jobs := b.lease(b.leaseParams(1, typ))
	if len(jobs) != 1 {
		b.t.Fatalf("leased %d jobs of type %s, want 1", len(jobs), typ)
	}
	return refOf(jobs[0])
}

func refOf(j *job.Job) job.LeaseRef { return job.LeaseRef{JobID: j.ID, Token: j.LeaseToken} }

// startParams starts attempt 1 under ref, with a one-minute lease and deadline.
func (b *bundle) startParams(ref job.LeaseRef) *store.JobStartParams {
	return &store.JobStartParams{Ref: ref, Attempt: 1, Now: b.now, LeaseUntil: b.now.Add(time.Minute),
		AttemptDeadline: b.now.Add(time.Minute)}
}

// start starts attempt 1 under ref and fails the test if it is refused.
func (b *bundle) start(ref job.LeaseRef) {
	b.t.Helper()
	b.write(func(tx store.Tx) error {
		ok, err := tx.JobStart(b.startParams(ref))
		if err == nil && !ok {
			err = fmt.Errorf("start of job %d refused", ref.JobID)
		}
		return err
	})
}

// finishParams ends attempt 1 of a job of type "t" in queue "default" under ref, moving the job
// to state: a success when state is SUCCEEDED, else a transient failure retried a minute later.
func (b *bundle) finishParams(ref job.LeaseRef, state job.State) *store.JobFinishParams {
	a := job.Attempt{Number: 1, WorkerID: "w", StartedAt: b.now, FinishedAt: b.now, Outcome: job.OutcomeSucceeded}
	p := &store.JobFinishParams{Ref: ref, Queue: "default", Type: "t", State: state, Attempt: a, Now: b.now}
	if state != job.StateSucceeded {
		p.Attempt.Outcome, p.Attempt.FailureKind = job.OutcomeFailed, job.KindTransient
		p.Attempt.ErrorType, p.Attempt.Message = "Timeout", "upstream timed out"
		p.RunAt = b.now.Add(time.Minute)
	}
	if state == job.StateDead {
		p.DeadReason = job.DeadMaxAttemptsExhausted
	}
	return p
}

// finish ends an attempt with p and fails the test if it is refused.
func (b *bundle) finish(p *store.JobFinishParams) {
	b.t.Helper()
	b.write(func(tx store.Tx) error {
		ok, err := tx.JobFinish(p)
		if err == nil && !ok {
			err = fmt.Errorf("finish of job %d refused", p.Ref.JobID)
		}
		return err
	})
}

// get reads one job.
func (b *bundle) get(id int64) *job.Job {
	b.t.Helper()
	j, err := b.s.JobGet(b.ctx, id)
	if err != nil {
		b.t.Fatalf("JobGet(%d): %v", id, err)
	}
	return j
}

// state reads one job's state.
func (b *bundle) state(id int64) job.State {
	b.t.Helper()
	return b.get(id).State
}

// counts reads JobCounts.
func (b *bundle) counts() []store.StateCount {
	b.t.Helper()
	c, err := b.s.JobCounts(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// ids lists the ids of jobs.
func ids(jobs []*job.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// equal fails the test when got and want differ.
func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}
