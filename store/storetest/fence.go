package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"FencedWritesNeedTheCurrentToken", testFencedWritesNeedTheCurrentToken},
	testCase{"FencedWritesRerunAfterCommitReportApplied", testFencedWritesRerunAfterCommitReportApplied},
)

// The lease token in each write's SQL is what fences a job once the broker's memory of its
// leases is gone (after a restart, or with several brokers on one database).

// fenceJobs is how many jobs a fence case leases: enough for a store's one-statement path of
// JobSucceedMany.
const fenceJobs = 6

// fence is a fence case's jobs: each leased twice (so each has had an earlier token) and, when
// running, started under its second lease.
type fence struct {
	*bundle
	refs    []job.LeaseRef // the current leases
	earlier []job.LeaseRef // the leases before them
}

func setupFence(b *bundle, running bool) *fence {
	b.t.Helper()
	f := &fence{bundle: b}
	var ps []*store.JobInsertParams
	for range fenceJobs {
		ps = append(ps, b.job("t"))
	}
	b.insert(ps...)
	for round := range 2 {
		jobs := b.lease(b.leaseParams(fenceJobs, "t"))
		if len(jobs) != fenceJobs {
			b.t.Fatalf("leased %d jobs, want %d", len(jobs), fenceJobs)
		}
		f.earlier, f.refs = f.refs, nil
		for _, j := range jobs {
			f.refs = append(f.refs, refOf(j))
		}
		if round == 0 {
			b.write(func(tx store.Tx) error {
				for _, ref := range f.refs {
					if ok, err := tx.JobRelease(ref); !ok || err != nil {
						return fmt.Errorf("release %v: %v, %v", ref, ok, err)
					}
				}
				return nil
			})
		}
	}
	if running {
		for _, ref := range f.refs {
			b.start(ref)
		}
	}
	return f
}

// snapshot is what a write fenced by a lease may change: everything but the payload.
func (f *fence) snapshot() string {
	f.t.Helper()
	var out string
	for _, ref := range f.refs {
		j := f.get(ref.JobID)
		out += fmt.Sprintf("%d: %s attempts=%d token=%s lease=%s started=%s finished=%s history=%v\n", j.ID, j.State,
			j.Attempts, j.LeaseToken, j.LeaseExpiresAt, j.StartedAt, j.FinishedAt, j.History)
	}
	return out + fmt.Sprint(f.counts())
}

// staleTokens are the tokens no write may accept once f.refs are current: the lease number one
// below and one above with the current secret (only the comparison of the number can refuse
// them), the current number with another secret, and the real tokens of the lease before.
func (f *fence) staleTokens() map[string][]job.LeaseRef {
	moved := func(change func(*job.LeaseToken)) []job.LeaseRef {
		out := make([]job.LeaseRef, len(f.refs))
		for i, r := range f.refs {
			change(&r.Token)
			out[i] = r
		}
		return out
	}
	return map[string][]job.LeaseRef{
		"older number":  moved(func(t *job.LeaseToken) { t.Seq-- }),
		"newer number":  moved(func(t *job.LeaseToken) { t.Seq++ }),
		"wrong secret":  moved(func(t *job.LeaseToken) { t.Secret[job.SecretSize-1] ^= 0x80 }),
		"no secret":     moved(func(t *job.LeaseToken) { t.Secret = [job.SecretSize]byte{} }),
		"earlier lease": f.earlier,
	}
}

// fencedWrite is one write that applies only under a job's current lease token.
type fencedWrite struct {
	name    string
	running bool // the job must be RUNNING (else LEASED) for the write to apply
	// apply runs the write for refs (one per job, or the first only) and reports whether it
	// applied to any.
	apply func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error)
}

var fencedWrites = []fencedWrite{
	{name: "JobStart", apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobStart(f.startParams(refs[0]))
	}},
	{name: "JobFinish success", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(f.finishParams(refs[0], job.StateSucceeded))
	}},
	{name: "JobFinish success while leased", apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(f.finishParams(refs[0], job.StateSucceeded))
	}},
	{name: "JobFinish retry", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(f.finishParams(refs[0], job.StateScheduled))
	}},
	{name: "JobFinish dead", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(f.finishParams(refs[0], job.StateDead))
	}},
	{name: "JobSucceedMany", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		ps := make([]*store.JobFinishParams, len(refs))
		for i, r := range refs {
			ps[i] = f.finishParams(r, job.StateSucceeded)
		}
		return anyOf(tx.JobSucceedMany(ps))
	}},
	{name: "JobRelease", apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobRelease(refs[0])
	}},
	{name: "JobStartMany", apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		ps := make([]*store.JobStartParams, len(refs))
		for i, r := range refs {
			ps[i] = f.startParams(r)
		}
		return anyOf(tx.JobStartMany(ps))
	}},
	{name: "JobReleaseMany", apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return anyOf(tx.JobReleaseMany(refs))
	}},
	{name: "JobExtendLeases", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		out, err := tx.JobExtendLeases(refs, f.now, f.now.Add(time.Hour))
		return len(out) > 0, err
	}},
	{name: "JobGetHeld", running: true, apply: func(f *fence, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		j, err := tx.JobGetHeld(refs[0])
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return j != nil && j.ID == refs[0].JobID, err
	}},
}

// A token older or newer than the current one, or with another secret, matches nothing and
// changes nothing; the current one applies.
func testFencedWritesNeedTheCurrentToken(t *testing.T, b *bundle) {
	for _, w := range fencedWrites {
		for _, tc := range []struct {
			name string
			want bool
		}{{"older number", false}, {"newer number", false}, {"wrong secret", false}, {"no secret", false},
			{"earlier lease", false}, {"current", true}} {
			t.Run(w.name+"/"+tc.name, func(t *testing.T) {
				f := setupFence(&bundle{t: t, s: b.s, ctx: b.ctx, now: b.now}, w.running)
				refs, ok := f.staleTokens()[tc.name]
				if !ok {
					refs = f.refs
				}
				before := f.snapshot()
				var got bool
				f.write(func(tx store.Tx) error {
					var err error
					got, err = w.apply(f, tx, refs)
					return err
				})
				if got != tc.want {
					t.Fatalf("%s with the %s applied = %v, want %v", w.name, tc.name, got, tc.want)
				}
				if after := f.snapshot(); !tc.want && after != before {
					t.Fatalf("%s with the %s changed the jobs:\n%s\nwas\n%s", w.name, tc.name, after, before)
				}
				// Leave the store empty of ready jobs of type t for the next subtest.
				f.write(func(tx store.Tx) error {
					for _, r := range f.refs {
						if _, err := tx.JobCancel(r.JobID, f.now); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// A write run again after its commit went through (the retry policy cannot tell a lost
// acknowledgement from a failure) finds its own effect and reports it applied, changing
// nothing more; the same write under another token is still refused.
func testFencedWritesRerunAfterCommitReportApplied(t *testing.T, b *bundle) {
	for _, w := range fencedWrites {
		t.Run(w.name, func(t *testing.T) {
			f := setupFence(&bundle{t: t, s: b.s, ctx: b.ctx, now: b.now}, w.running)
			for run := 1; run <= 2; run++ {
				f.write(func(tx store.Tx) error {
					ok, err := w.apply(f, tx, f.refs)
					if err == nil && !ok {
						err = fmt.Errorf("run %d of %s was refused, want it reported applied", run, w.name)
					}
					return err
				})
			}
			once := f.snapshot()
			for name, refs := range f.staleTokens() {
				f.write(func(tx store.Tx) error {
					ok, err := w.apply(f, tx, refs)
					if err == nil && ok {
						err = fmt.Errorf("%s with the %s after it applied: applied, want refused", w.name, name)
					}
					return err
				})
			}
			if after := f.snapshot(); after != once {
				t.Fatalf("refused reruns changed the jobs:\n%s\nwas\n%s", after, once)
			}
			f.write(func(tx store.Tx) error {
				for _, r := range f.refs {
					if _, err := tx.JobCancel(r.JobID, f.now); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// anyOf reports whether a write of many applied to any of them.
func anyOf(applied []bool, err error) (bool, error) {
	return slices.Contains(applied, true), err
}
