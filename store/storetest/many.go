package storetest

import (
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"JobStartMany", testJobStartMany},
	testCase{"JobReleaseMany", testJobReleaseMany},
	testCase{"JobLockRows", testJobLockRows},
)

// manyLeases leases n jobs of type "t" and returns their leases, with a stale lease of the
// first job in front: a batch as the broker's writer gathers it.
func (b *bundle) manyLeases(n int) (refs []job.LeaseRef, jobs []*job.Job) {
	b.t.Helper()
	var ps []*store.JobInsertParams
	for range n {
		ps = append(ps, b.job("t"))
	}
	b.insert(ps...)
	jobs = b.lease(b.leaseParams(n, "t"))
	if len(jobs) != n {
		b.t.Fatalf("leased %d jobs, want %d", len(jobs), n)
	}
	refs = []job.LeaseRef{{JobID: jobs[0].ID, Token: job.LeaseToken{Seq: 9}}}
	for _, j := range jobs {
		refs = append(refs, refOf(j))
	}
	return refs, jobs
}

// wantAllButFirst is what a batch of manyLeases applies: all but the stale lease.
func wantAllButFirst(n int) []bool {
	want := make([]bool, n)
	for i := 1; i < n; i++ {
		want[i] = true
	}
	return want
}

// JobStartMany starts every current lease it is given, once each, and refuses the stale ones;
// the same batch again is acknowledged without counting a second attempt.
func testJobStartMany(t *testing.T, b *bundle) {
	for _, n := range []int{1, 5} {
		refs, jobs := b.manyLeases(n)
		refs = append(refs, refs[len(refs)-1]) // one lease listed twice
		var ps []*store.JobStartParams
		for _, r := range refs {
			ps = append(ps, b.startParams(r))
		}
		want := wantAllButFirst(len(refs))
		for run := range 2 {
			var started []bool
			b.write(func(tx store.Tx) error {
				var err error
				started, err = tx.JobStartMany(ps)
				return err
			})
			equal(t, "started", started, want)
			for _, j := range jobs {
				if got := b.get(j.ID); got.State != job.StateRunning || got.Attempts != 1 || !got.StartedAt.Equal(b.now) {
					t.Fatalf("run %d: job %d after JobStartMany: %s attempts %d started %s", run+1, j.ID, got.State, got.Attempts, got.StartedAt)
				}
			}
		}
		// A start of another attempt over the stored one is stale.
		p := b.startParams(refs[1])
		p.Attempt = 2
		b.write(func(tx store.Tx) error {
			started, err := tx.JobStartMany([]*store.JobStartParams{p})
			equal(t, "second attempt started", started, []bool{false})
			return err
		})
		for _, j := range jobs {
			b.finish(b.finishParams(refOf(j), job.StateSucceeded))
		}
	}
	b.write(func(tx store.Tx) error {
		started, err := tx.JobStartMany(nil)
		equal(t, "nothing started", len(started), 0)
		return err
	})
}

// JobReleaseMany hands every current LEASED job it is given back to PENDING; stale leases and
// RUNNING jobs are refused; the same batch again is acknowledged.
func testJobReleaseMany(t *testing.T, b *bundle) {
	refs, jobs := b.manyLeases(4)
	running := refs[len(refs)-1]
	b.start(running)
	refs = append(refs, refs[1]) // one lease listed twice
	want := wantAllButFirst(len(refs))
	want[len(jobs)] = false // the running one
	for range 2 {
		var released []bool
		b.write(func(tx store.Tx) error {
			var err error
			released, err = tx.JobReleaseMany(refs)
			return err
		})
		equal(t, "released", released, want)
	}
	for _, j := range jobs[:len(jobs)-1] {
		if got := b.get(j.ID); got.State != job.StatePending || got.Attempts != 0 || !got.LeaseExpiresAt.IsZero() || got.WorkerID != "" {
			t.Fatalf("released job %d: %s attempts %d lease until %s worker %q", j.ID, got.State, got.Attempts, got.LeaseExpiresAt, got.WorkerID)
		}
	}
	if st := b.state(running.JobID); st != job.StateRunning {
		t.Fatalf("running job is %s after a refused release", st)
	}
}

// JobLockRows changes nothing: the transaction that locked jobs, in any order, with ids listed
// twice and an id of no job, then writes them one at a time and many at once as a writer's
// batch does, each write applied; with no ids it locks nothing.
func testJobLockRows(t *testing.T, b *bundle) {
	_, jobs := b.manyLeases(3)
	ids := []int64{jobs[2].ID, jobs[0].ID, jobs[2].ID, jobs[1].ID, jobs[2].ID + 1000}
	var finished bool
	var succeeded []bool
	b.write(func(tx store.Tx) error {
		if err := tx.JobLockRows(ids); err != nil {
			return err
		}
		if err := tx.JobLockRows(nil); err != nil {
			return err
		}
		var err error
		if finished, err = tx.JobFinish(b.finishParams(refOf(jobs[2]), job.StateDead)); err != nil {
			return err
		}
		succeeded, err = tx.JobSucceedMany([]*store.JobFinishParams{
			b.finishParams(refOf(jobs[1]), job.StateSucceeded), b.finishParams(refOf(jobs[0]), job.StateSucceeded)})
		return err
	})
	equal(t, "finished", finished, true)
	equal(t, "succeeded", succeeded, []bool{true, true})
	for i, want := range []job.State{job.StateSucceeded, job.StateSucceeded, job.StateDead} {
		if got := b.get(jobs[i].ID).State; got != want {
			t.Fatalf("job %d: %s, want %s", jobs[i].ID, got, want)
		}
	}
	b.write(func(tx store.Tx) error { return tx.JobLockRows(nil) })
}
