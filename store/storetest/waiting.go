package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"ChangeWaitingRunNow", testChangeWaitingRunNow},
	testCase{"ChangeWaitingRetryNow", testChangeWaitingRetryNow},
	testCase{"ChangeWaitingDelete", testChangeWaitingDelete},
	testCase{"ChangeWaitingPriority", testChangeWaitingPriority},
)

var waitingStates = []job.State{job.StateScheduled, job.StatePending}

// change applies c in one write and returns what JobChangeWaiting answered.
func (b *bundle) change(c *store.WaitingChange) (*job.Job, bool) {
	b.t.Helper()
	var before *job.Job
	var changed bool
	c.Now = b.now
	b.write(func(tx store.Tx) error {
		var err error
		before, changed, err = tx.JobChangeWaiting(c)
		return err
	})
	return before, changed
}

// A SCHEDULED job run now is PENDING, due now; a job in any other state is left alone.
func testChangeWaitingRunNow(t *testing.T, b *bundle) {
	later := b.job("t")
	later.RunAt = b.now.Add(time.Hour)
	ids := b.insert(later, b.job("t"))
	b.now = b.now.Add(time.Second)
	before, changed := b.change(&store.WaitingChange{ID: ids[0], From: []job.State{job.StateScheduled}, RunNow: true})
	if !changed || before.State != job.StateScheduled {
		t.Fatalf("run now of a SCHEDULED job: changed %v, before %s", changed, before.State)
	}
	j := b.get(ids[0])
	equal(t, "state, run_at", []any{j.State, j.RunAt}, []any{job.StatePending, b.now})

	before, changed = b.change(&store.WaitingChange{ID: ids[1], From: []job.State{job.StateScheduled}, RunNow: true})
	if changed || before.State != job.StatePending {
		t.Fatalf("run now of a PENDING job: changed %v, before %s; want unchanged", changed, before.State)
	}
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		_, _, err := tx.JobChangeWaiting(&store.WaitingChange{ID: 999, From: waitingStates, RunNow: true, Now: b.now})
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("change of no job: %v, want ErrNotFound", err)
	}
}

// Retry now applies only to a SCHEDULED job that has spent an attempt.
func testChangeWaitingRetryNow(t *testing.T, b *bundle) {
	later := b.job("later")
	later.RunAt = b.now.Add(time.Hour)
	first := b.insert(later)[0]
	retry := &store.WaitingChange{ID: first, From: []job.State{job.StateScheduled}, Retrying: true, RunNow: true}
	if _, changed := b.change(retry); changed {
		t.Fatal("retry now of a job scheduled for its first run changed it")
	}
	id := b.insert(b.job("t"))[0]
	ref := b.leaseOne("t")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateScheduled))
	retry.ID = id
	if _, changed := b.change(retry); !changed {
		t.Fatal("retry now of a job waiting out its backoff changed nothing")
	}
	j := b.get(id)
	equal(t, "state, run_at, attempts", []any{j.State, j.RunAt, j.Attempts}, []any{job.StatePending, b.now, 1})
}

// A waiting job is deleted with its attempts, and its idempotency key is free again; a leased
// job is not deleted.
func testChangeWaitingDelete(t *testing.T, b *bundle) {
	p := b.job("t")
	p.IdempotencyKey = "once"
	id := b.insert(p)[0]
	ref := b.leaseOne("t")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateScheduled))
	before, changed := b.change(&store.WaitingChange{ID: id, From: waitingStates, Delete: true})
	if !changed || before.ID != id || before.State != job.StateScheduled {
		t.Fatalf("delete of a job waiting to retry: changed %v, before %+v", changed, before)
	}
	if _, err := b.s.JobGet(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JobGet of a deleted job: %v, want ErrNotFound", err)
	}
	if again := b.insertResults(p)[0]; again.Duplicate {
		t.Fatalf("idempotency key of a deleted job still answered with job %d", again.ID)
	}
	leased := b.leaseOne("t")
	if before, changed := b.change(&store.WaitingChange{ID: leased.JobID, From: waitingStates, Delete: true}); changed || before.State != job.StateLeased {
		t.Fatalf("delete of a LEASED job: changed %v, before %s; want unchanged", changed, before.State)
	}
	equal(t, "state of the leased job", b.state(leased.JobID), job.StateLeased)
}

// A waiting job's priority changes, and with it the order of dispatch; a running job's does
// not.
func testChangeWaitingPriority(t *testing.T, b *bundle) {
	ids := b.insert(b.job("t"), b.job("t"))
	high := 5
	if _, changed := b.change(&store.WaitingChange{ID: ids[1], From: waitingStates, Priority: &high}); !changed {
		t.Fatal("priority of a PENDING job unchanged")
	}
	equal(t, "priority", b.get(ids[1]).Priority, 5)
	ref := b.leaseOne("t")
	equal(t, "first leased", ref.JobID, ids[1])
	b.start(ref)
	if before, changed := b.change(&store.WaitingChange{ID: ids[1], From: waitingStates, Priority: new(int)}); changed || before.State != job.StateRunning {
		t.Fatalf("priority of a RUNNING job: changed %v, before %s; want unchanged", changed, before.State)
	}
	equal(t, "priority of the running job", b.get(ids[1]).Priority, 5)
}
