package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// fenceBundle is a store holding fenceJobs jobs of type "t", each leased twice (so that each
// has had an earlier lease token) and, when running, started under its second lease.
type fenceBundle struct {
	s       *Store
	now     time.Time
	refs    []job.LeaseRef // the current leases
	earlier []job.LeaseRef // the leases before them
}

const fenceJobs = 4 // enough for JobSucceedMany's one-statement path (succeedManyMin)

func setupFence(t *testing.T, running bool) *fenceBundle {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "jobwire.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	fb := &fenceBundle{s: s, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ps := make([]*store.JobInsertParams, fenceJobs)
	for i := range ps {
		ps[i] = &store.JobInsertParams{Type: "t", Queue: "default", MaxAttempts: 3, RunAt: fb.now, Now: fb.now, AttemptTimeout: time.Minute}
	}
	fb.write(t, func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err })
	for round := range 2 {
		fb.write(t, func(tx store.Tx) error {
			jobs, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: fenceJobs, WorkerID: "w",
				Now: fb.now, LeaseUntil: fb.now.Add(time.Minute)})
			if err != nil || len(jobs) != fenceJobs {
				return fmt.Errorf("leased %d jobs (%v), want %d", len(jobs), err, fenceJobs)
			}
			fb.earlier, fb.refs = fb.refs, nil
			for _, j := range jobs {
				ref := job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
				fb.refs = append(fb.refs, ref)
				if round == 0 {
					if ok, err := tx.JobRelease(ref); !ok || err != nil {
						return fmt.Errorf("release %v: %v, %v", ref, ok, err)
					}
				}
			}
			return nil
		})
	}
	if running {
		fb.write(t, func(tx store.Tx) error {
			for _, ref := range fb.refs {
				if ok, err := tx.JobStart(fb.startParams(ref)); !ok || err != nil {
					return fmt.Errorf("start %v: %v, %v", ref, ok, err)
				}
			}
			return nil
		})
	}
	return fb
}

func (fb *fenceBundle) write(t *testing.T, fn func(tx store.Tx) error) {
	t.Helper()
	if err := fb.s.Write(context.Background(), "test", fn); err != nil {
		t.Fatal(err)
	}
}

func (fb *fenceBundle) startParams(ref job.LeaseRef) *store.JobStartParams {
	return &store.JobStartParams{Ref: ref, Attempt: 1, Now: fb.now, LeaseUntil: fb.now.Add(time.Minute),
		AttemptDeadline: fb.now.Add(time.Minute)}
}

func (fb *fenceBundle) finishParams(ref job.LeaseRef, state job.State) *store.JobFinishParams {
	a := job.Attempt{Number: 1, WorkerID: "w", StartedAt: fb.now, FinishedAt: fb.now, Outcome: job.OutcomeSucceeded}
	p := &store.JobFinishParams{Ref: ref, Queue: "default", Type: "t", State: state, Attempt: a, Now: fb.now}
	if state != job.StateSucceeded {
		p.Attempt.Outcome, p.Attempt.FailureKind, p.Attempt.ErrorType = job.OutcomeFailed, job.KindTransient, "Timeout"
		p.RunAt = fb.now.Add(time.Minute)
	}
	return p
}

// snapshot is what a write fenced by a lease may change: everything but the payload.
func (fb *fenceBundle) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	for _, ref := range fb.refs {
		j, err := fb.s.JobGet(context.Background(), ref.JobID)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%d: %s attempts=%d token=%s lease=%s started=%s finished=%s history=%v\n", j.ID, j.State,
			j.Attempts, j.LeaseToken, j.LeaseExpiresAt, j.StartedAt, j.FinishedAt, j.History)
	}
	totals, err := fb.s.JobCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out + fmt.Sprint(totals)
}

// withToken is ref with its token's lease number moved by d and its secret kept: only the
// comparison of the number can refuse it, so a fence that took an older (d < 0) or newer
// (d > 0) number for the current one lets it through.
func withToken(ref job.LeaseRef, d int64) job.LeaseRef {
	ref.Token.Seq += d
	return ref
}

func withTokens(refs []job.LeaseRef, d int64) []job.LeaseRef {
	out := make([]job.LeaseRef, len(refs))
	for i, r := range refs {
		out[i] = withToken(r, d)
	}
	return out
}

// staleTokens are the tokens no write may accept once refs are current: numbers one below and
// one above with the current secret, and the real tokens of the lease before.
func (fb *fenceBundle) staleTokens() map[string][]job.LeaseRef {
	return map[string][]job.LeaseRef{
		"older number":  withTokens(fb.refs, -1),
		"newer number":  withTokens(fb.refs, +1),
		"earlier lease": fb.earlier,
	}
}

// fencedWrite is one write that applies only under a job's current lease token.
type fencedWrite struct {
	name    string
	running bool // the job must be RUNNING (else LEASED) for the write to apply
	// apply runs the write for refs (one per job, or the first only) and reports whether it
	// applied to any.
	apply func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error)
}

var fencedWrites = []fencedWrite{
	{name: "JobStart", apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobStart(fb.startParams(refs[0]))
	}},
	{name: "JobFinish success", running: true, apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(fb.finishParams(refs[0], job.StateSucceeded))
	}},
	{name: "JobFinish retry", running: true, apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobFinish(fb.finishParams(refs[0], job.StateScheduled))
	}},
	{name: "JobSucceedMany", running: true, apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		ps := make([]*store.JobFinishParams, len(refs))
		for i, r := range refs {
			ps[i] = fb.finishParams(r, job.StateSucceeded)
		}
		applied, err := tx.JobSucceedMany(ps)
		any := false
		for _, a := range applied {
			any = any || a
		}
		return any, err
	}},
	{name: "JobRelease", apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		return tx.JobRelease(refs[0])
	}},
	{name: "JobExtendLeases", running: true, apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		out, err := tx.JobExtendLeases(refs, fb.now.Add(time.Hour))
		return len(out) > 0, err
	}},
	{name: "JobGetHeld", running: true, apply: func(fb *fenceBundle, tx store.Tx, refs []job.LeaseRef) (bool, error) {
		j, err := tx.JobGetHeld(refs[0])
		if err == store.ErrNotFound {
			return false, nil
		}
		return j != nil && j.ID == refs[0].JobID, err
	}},
}

// The lease token in each write's SQL is what fences a job once the broker's memory of its
// leases is gone (after a restart, or with several brokers on one database): a token older or
// newer than the current one must match nothing and change nothing, the current one must apply.
func TestFencedWritesNeedTheCurrentToken(t *testing.T) {
	t.Parallel()
	for _, w := range fencedWrites {
		for _, tc := range []struct {
			name string
			want bool
		}{{"older number", false}, {"newer number", false}, {"earlier lease", false}, {"current", true}} {
			t.Run(w.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				fb := setupFence(t, w.running)
				refs, ok := fb.staleTokens()[tc.name]
				if !ok {
					refs = fb.refs
				}
				before := fb.snapshot(t)
				var got bool
				fb.write(t, func(tx store.Tx) error {
					var err error
					got, err = w.apply(fb, tx, refs)
					return err
				})
				if got != tc.want {
					t.Fatalf("%s with the %s applied = %v, want %v", w.name, tc.name, got, tc.want)
				}
				if after := fb.snapshot(t); !tc.want && after != before {
					t.Fatalf("%s with the %s changed the jobs:\n%s\nwas\n%s", w.name, tc.name, after, before)
				}
			})
		}
	}
}

// A write run again after its commit went through (the retry policy cannot tell a lost
// acknowledgement from a failure) finds its own effect and reports it applied, changing
// nothing more; the same write under another token or for another attempt is still refused.
func TestFencedWritesRerunAfterCommitReportApplied(t *testing.T) {
	t.Parallel()
	for _, w := range fencedWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			fb := setupFence(t, w.running)
			for run := 1; run <= 2; run++ {
				fb.write(t, func(tx store.Tx) error {
					ok, err := w.apply(fb, tx, fb.refs)
					if err == nil && !ok {
						err = fmt.Errorf("run %d of %s was refused, want it reported applied", run, w.name)
					}
					return err
				})
			}
			once := fb.snapshot(t)
			for name, refs := range fb.staleTokens() {
				fb.write(t, func(tx store.Tx) error {
					ok, err := w.apply(fb, tx, refs)
					if err == nil && ok {
						err = fmt.Errorf("%s with the %s after it applied: applied, want refused", w.name, name)
					}
					return err
				})
			}
			if after := fb.snapshot(t); after != once {
				t.Fatalf("refused reruns changed the jobs:\n%s\nwas\n%s", after, once)
			}
		})
	}
}

// A start found already stored counts as the same start only for the same attempt.
func TestJobStartRerunOfAnotherAttemptIsStale(t *testing.T) {
	t.Parallel()
	fb := setupFence(t, true)
	p := fb.startParams(fb.refs[0])
	p.Attempt = 2
	fb.write(t, func(tx store.Tx) error {
		ok, err := tx.JobStart(p)
		if err == nil && ok {
			err = fmt.Errorf("start of attempt 2 over a stored start of attempt 1 applied, want refused")
		}
		return err
	})
}
