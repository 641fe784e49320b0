package storetest

import (
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"JobStartMany", testJobStartMany},
	testCase{"JobReleaseMany", testJobReleaseMany},
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
