package storetest

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"ResultStoredWithSuccess", testResultStoredWithSuccess},
	testCase{"ResultDeletedWithJob", testResultDeletedWithJob},
	testCase{"JobProgressMany", testJobProgressMany},
	testCase{"JobVersions", testJobVersions},
	testCase{"FinalAmong", testFinalAmong},
	testCase{"JobOutcomes", testJobOutcomes},
	testCase{"JobOutcomesOfManyJobs", testJobOutcomesOfManyJobs},
)

// A success's result is stored by every way a success is written (one at a time, many at once,
// many at commit), read back by JobGet, and a success without one reads as none.
func testResultStoredWithSuccess(t *testing.T, b *bundle) {
	for _, n := range []int{1, 6} { // JobSucceedMany writes fewer than a few one by one
		for _, how := range []string{"JobFinish", "JobSucceedMany", "JobSucceedManyAtCommit"} {
			var ps []*store.JobInsertParams
			for range n {
				ps = append(ps, b.job("t"))
			}
			b.insert(ps...)
			jobs := b.lease(b.leaseParams(n, "t"))
			var fs []*store.JobFinishParams
			for i, j := range jobs {
				b.start(refOf(j))
				f := b.finishParams(refOf(j), job.StateSucceeded)
				if i%2 == 0 {
					f.Result = []byte{0, 1, 2, 0xff, byte(i)} // binary, not text
				}
				fs = append(fs, f)
			}
			b.write(func(tx store.Tx) error {
				switch how {
				case "JobFinish":
					for _, f := range fs {
						if _, err := tx.JobFinish(f); err != nil {
							return err
						}
					}
					return nil
				case "JobSucceedMany":
					_, err := tx.JobSucceedMany(fs)
					return err
				}
				return tx.JobSucceedManyAtCommit(fs, func([]bool, error) {})
			})
			for i, j := range jobs {
				got := b.get(j.ID)
				if got.State != job.StateSucceeded || !bytes.Equal(got.Result, fs[i].Result) {
					t.Fatalf("%s of %d: job %d is %s with result %x, want SUCCEEDED with %x", how, n, j.ID, got.State, got.Result, fs[i].Result)
				}
				if fs[i].Result == nil && got.Result != nil {
					t.Fatalf("%s: job %d returned no result and reads %x", how, j.ID, got.Result)
				}
			}
		}
	}
}

// Retention deletes a result with its job.
func testResultDeletedWithJob(t *testing.T, b *bundle) {
	id := b.insert(b.job("t"))[0]
	ref := b.leaseOne("t")
	b.start(ref)
	f := b.finishParams(ref, job.StateSucceeded)
	f.Result = bytes.Repeat([]byte("r"), 64<<10)
	b.finish(f)
	if got := b.get(id); len(got.Result) != 64<<10 {
		t.Fatalf("result of %d bytes, want %d", len(got.Result), 64<<10)
	}
	b.write(func(tx store.Tx) error {
		_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded},
			FinishedBefore: b.now.Add(time.Hour), Limit: 10})
		return err
	})
	if _, err := b.s.JobGet(b.ctx, id); err == nil {
		t.Fatal("job still there after retention deleted it")
	}
}

// JobProgressMany stores the newest report of each current lease, refuses stale leases and
// finished jobs, and keeps the progress after the job finished.
func testJobProgressMany(t *testing.T, b *bundle) {
	b.insert(b.job("t"), b.job("t"), b.job("t"))
	running, leased, done := b.leaseOne("t"), b.leaseOne("t"), b.leaseOne("t")
	b.start(running)
	b.start(done)
	b.finish(b.finishParams(done, job.StateSucceeded))
	stale := job.LeaseRef{JobID: running.JobID, Token: job.LeaseToken{Seq: running.Token.Seq + 1}}
	report := func(ref job.LeaseRef, fraction float64, has bool, msg string, at time.Duration) *store.JobProgressParams {
		return &store.JobProgressParams{Ref: ref, Progress: job.Progress{Attempt: 1, Fraction: fraction,
			HasFraction: has, Message: msg, UpdatedAt: b.now.Add(at)}}
	}
	batch := []*store.JobProgressParams{
		report(running, 0.25, true, "first", time.Second),
		report(leased, 0, false, "only a message", time.Second),
		report(stale, 0.9, true, "stale", time.Second),
		report(done, 0.9, true, "finished", time.Second),
		report(running, 0.5, true, "halfway: ünïcode", 2*time.Second), // the later one wins
	}
	var applied []bool
	b.write(func(tx store.Tx) error {
		var err error
		applied, err = tx.JobProgressMany(batch)
		return err
	})
	equal(t, "applied", applied, []bool{true, true, false, false, true})
	equal(t, "running's progress", b.get(running.JobID).Progress, &job.Progress{Attempt: 1, Fraction: 0.5,
		HasFraction: true, Message: "halfway: ünïcode", UpdatedAt: b.now.Add(2 * time.Second)})
	equal(t, "leased's progress", b.get(leased.JobID).Progress, &job.Progress{Attempt: 1, Message: "only a message",
		UpdatedAt: b.now.Add(time.Second)})
	if p := b.get(done.JobID).Progress; p != nil {
		t.Fatalf("a finished job took progress: %+v", p)
	}
	// A report under another token of a job's lease, alone in its write, changes nothing:
	// neither another sequence number with the same secret, nor the same number with another.
	otherSeq, otherSecret := leased, leased
	otherSeq.Token.Seq++
	otherSecret.Token.Secret[0]++
	for _, ref := range []job.LeaseRef{otherSeq, otherSecret} {
		b.write(func(tx store.Tx) error {
			var err error
			applied, err = tx.JobProgressMany([]*store.JobProgressParams{report(ref, 1, true, "forged", 3*time.Second)})
			return err
		})
		equal(t, "applied under another token", applied, []bool{false})
	}
	if p := b.get(leased.JobID).Progress; p == nil || p.Message != "only a message" {
		t.Fatalf("progress after reports under other tokens: %+v", p)
	}
	b.finish(b.finishParams(running, job.StateSucceeded))
	if p := b.get(running.JobID).Progress; p == nil || p.Message != "halfway: ünïcode" {
		t.Fatalf("progress after the job succeeded: %+v, want the last one kept", p)
	}
}

// JobVersions reads each existing job's state, attempts and when its progress changed.
func testJobVersions(t *testing.T, b *bundle) {
	ids := b.insert(b.job("t"), b.job("t"))
	ref := b.leaseOne("t")
	b.start(ref)
	b.write(func(tx store.Tx) error {
		_, err := tx.JobProgressMany([]*store.JobProgressParams{{Ref: ref,
			Progress: job.Progress{Attempt: 1, Message: "m", UpdatedAt: b.now.Add(time.Second)}}})
		return err
	})
	got, err := b.s.JobVersions(b.ctx, append(ids, 1<<40))
	if err != nil {
		t.Fatal(err)
	}
	other := ids[0]
	if other == ref.JobID {
		other = ids[1]
	}
	equal(t, "versions", got, map[int64]store.JobVersion{
		ref.JobID: {State: job.StateRunning, Attempts: 1, ProgressAt: b.now.Add(time.Second)},
		other:     {State: job.StatePending},
	})
}

// FinalAmong counts the jobs that exist among those asked, each once, and reads which are final,
// in id order, whether the ids come in one range without a gap, in ranges, or one by one.
func testFinalAmong(t *testing.T, b *bundle) {
	ps := make([]*store.JobInsertParams, 12)
	for i := range ps {
		ps[i] = b.job("t")
	}
	ids := b.insert(ps...)
	var final []int64
	for _, state := range []job.State{job.StateSucceeded, job.StateDead, job.StateScheduled} {
		ref := b.leaseOne("t")
		b.start(ref)
		b.finish(b.finishParams(ref, state))
		if state.Final() {
			final = append(final, ref.JobID)
		}
	}
	slices.Sort(final)
	var everyOther []int64
	for i := 0; i < len(ids); i += 2 {
		everyOther = append(everyOther, ids[i])
	}
	twoRanges := append(slices.Clone(ids[7:]), ids[:6]...)
	slices.Reverse(twoRanges)
	// among is the final jobs of asked.
	among := func(asked []int64) []int64 {
		return slices.DeleteFunc(slices.Clone(final), func(id int64) bool { return !slices.Contains(asked, id) })
	}
	cases := []struct {
		name      string
		asked     []int64
		found     int
		wantFinal []int64
	}{
		{"one range, an unknown id and one named twice", append(append([]int64{1 << 40}, ids...), ids[3]), len(ids), final},
		{"two ranges, backwards", twoRanges, len(twoRanges), among(twoRanges)},
		{"one by one", everyOther, len(everyOther), among(everyOther)},
		{"none exists", []int64{1 << 40, 1<<40 + 1}, 0, nil},
	}
	for _, c := range cases {
		found, got, err := b.s.FinalAmong(b.ctx, c.asked)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if found != c.found || !slices.Equal(got, c.wantFinal) {
			t.Fatalf("%s: found %d jobs, final %v; want %d, final %v", c.name, found, got, c.found, c.wantFinal)
		}
	}
}

// JobOutcomes reads existing jobs in the order asked, without payload or history, with their
// results and progress.
func testJobOutcomes(t *testing.T, b *bundle) {
	ids := b.insert(b.job("t"), b.job("t"))
	ref := b.leaseOne("t")
	b.start(ref)
	f := b.finishParams(ref, job.StateSucceeded)
	f.Result = []byte("r")
	b.write(func(tx store.Tx) error {
		if _, err := tx.JobProgressMany([]*store.JobProgressParams{{Ref: ref,
			Progress: job.Progress{Attempt: 1, Message: "m", UpdatedAt: b.now}}}); err != nil {
			return err
		}
		_, err := tx.JobFinish(f)
		return err
	})
	other := ids[0]
	if other == ref.JobID {
		other = ids[1]
	}
	got, err := b.s.JobOutcomes(b.ctx, []int64{ref.JobID, 1 << 40, other})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != ref.JobID || got[1].ID != other {
		t.Fatalf("JobOutcomes read %d jobs: %v", len(got), got)
	}
	if string(got[0].Result) != "r" || got[0].Progress == nil || got[0].Progress.Message != "m" || len(got[0].Payload) != 0 {
		t.Fatalf("finished job: result %q progress %+v payload %q", got[0].Result, got[0].Progress, got[0].Payload)
	}
	if got[1].Result != nil || got[1].Progress != nil || got[1].State != job.StatePending {
		t.Fatalf("pending job: %+v", got[1])
	}
}

// A watch reads thousands of jobs at once (its first look, and the jobs of a burst that
// finished): JobVersions and JobOutcomes read them all, in the order asked, however many.
func testJobOutcomesOfManyJobs(t *testing.T, b *bundle) {
	ps := make([]*store.JobInsertParams, 600)
	for i := range ps {
		ps[i] = b.job("t")
	}
	ids := b.insert(ps...)
	asked := append([]int64{1 << 40}, ids...)
	slices.Reverse(asked)
	versions, err := b.s.JobVersions(b.ctx, asked)
	if err != nil || len(versions) != len(ids) {
		t.Fatalf("JobVersions read %d versions of %d jobs: %v", len(versions), len(ids), err)
	}
	found, final, err := b.s.FinalAmong(b.ctx, asked)
	if err != nil || found != len(ids) || len(final) != 0 {
		t.Fatalf("FinalAmong found %d of %d jobs, %d final: %v", found, len(ids), len(final), err)
	}
	got, err := b.s.JobOutcomes(b.ctx, asked)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("JobOutcomes read %d of %d jobs: %v", len(got), len(ids), err)
	}
	for i, j := range got {
		if want := ids[len(ids)-1-i]; j.ID != want || j.State != job.StatePending || j.Type != "t" {
			t.Fatalf("JobOutcomes[%d] = job %d %s %q, want job %d PENDING \"t\"", i, j.ID, j.State, j.Type, want)
		}
	}
}
