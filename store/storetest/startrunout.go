package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"JobStartRunOut", testJobStartRunOut},
)

// JobStart and JobStartMany leave a lease that ran out as it is: a start read at its deadline
// or after it (p.Now) neither makes the job RUNNING nor spends an attempt nor moves the
// deadline, even while no sweep has ended the lease yet, so the sweep hands the job back with
// no attempt spent. A nanosecond before the deadline the start goes through, and stored again
// it is still reported applied: the deadline it stored is after its own p.Now.
func testJobStartRunOut(t *testing.T, b *bundle) {
	b.insert(b.job("t"), b.job("t"), b.job("t"))
	// Each lease runs until a minute from b.now; long's is extended well past that, so that a
	// batch can mix a current lease with a run-out one.
	one, many, long := b.leaseOne("t"), b.leaseOne("t"), b.leaseOne("t")
	deadline := b.now.Add(time.Minute)
	b.write(func(tx store.Tx) error {
		out, err := tx.JobExtendLeases([]job.LeaseRef{long}, b.now, b.now.Add(2*time.Hour))
		if err == nil && len(out) != 1 {
			err = fmt.Errorf("lease of job %d not extended", long.JobID)
		}
		return err
	})
	params := func(ref job.LeaseRef, at time.Time) *store.JobStartParams {
		return &store.JobStartParams{Ref: ref, Attempt: 1, Now: at, LeaseUntil: at.Add(time.Minute),
			AttemptDeadline: at.Add(time.Minute)}
	}
	start := func(p *store.JobStartParams) bool {
		t.Helper()
		var ok bool
		b.write(func(tx store.Tx) error {
			var err error
			ok, err = tx.JobStart(p)
			return err
		})
		return ok
	}
	startMany := func(ps ...*store.JobStartParams) []bool {
		t.Helper()
		var started []bool
		b.write(func(tx store.Tx) error {
			var err error
			started, err = tx.JobStartMany(ps)
			return err
		})
		return started
	}
	before := map[int64]*job.Job{one.JobID: b.get(one.JobID), many.JobID: b.get(many.JobID)}
	unchanged := func(late time.Duration) {
		t.Helper()
		for id, was := range before {
			if j := b.get(id); !reflect.DeepEqual(j, was) {
				t.Fatalf("job %d changed by a start %s after its lease ran out:\n got %+v\nwant %+v", id, late, j, was)
			}
		}
	}
	for _, at := range []time.Time{deadline, deadline.Add(time.Nanosecond), deadline.Add(time.Hour)} {
		late := at.Sub(deadline)
		if start(params(one, at)) {
			t.Errorf("JobStart %s after the deadline applied", late)
		}
		equal(t, fmt.Sprintf("JobStartMany %s after the deadline", late), startMany(params(many, at)), []bool{false})
		unchanged(late)
	}
	// In one batch the current lease starts and the run-out one does not.
	equal(t, "JobStartMany of a run-out and a current lease", startMany(params(many, deadline), params(long, deadline)),
		[]bool{false, true})
	unchanged(0)
	if j := b.get(long.JobID); j.State != job.StateRunning || j.Attempts != 1 {
		t.Fatalf("job %d started in a batch: %s attempts %d, want RUNNING attempts 1", long.JobID, j.State, j.Attempts)
	}

	// A nanosecond before the deadline both start, and the same start again is applied.
	at := deadline.Add(-time.Nanosecond)
	for run := range 2 {
		if !start(params(one, at)) {
			t.Errorf("run %d: JobStart a nanosecond before the deadline refused", run+1)
		}
		equal(t, fmt.Sprintf("run %d: JobStartMany a nanosecond before the deadline", run+1),
			startMany(params(many, at)), []bool{true})
		for _, id := range []int64{one.JobID, many.JobID} {
			if j := b.get(id); j.State != job.StateRunning || j.Attempts != 1 || !j.StartedAt.Equal(at) ||
				!j.LeaseExpiresAt.Equal(at.Add(time.Minute)) {
				t.Fatalf("run %d: job %d: %s attempts %d started %s lease until %s; want RUNNING attempts 1 started %s until %s",
					run+1, id, j.State, j.Attempts, j.StartedAt, j.LeaseExpiresAt, at, at.Add(time.Minute))
			}
		}
	}
}
