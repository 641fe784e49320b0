package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"DepsReleasedByEveryWayASuccessIsWritten", testDepsReleasedBySuccess},
	testCase{"DepsCancelledDownTheGraph", testDepsCancelledDownTheGraph},
	testCase{"DepsSettledOnceWhenRepeated", testDepsSettledOnce},
	testCase{"DepsAddRefusesWhatCannotRun", testDepsAddRefuses},
	testCase{"DepsReadBack", testDepsReadBack},
	testCase{"DepsChangedToldAfterCommit", testDepsChangedTold},
)

// withParents inserts a job of type typ and makes it wait for parents (in one write), and
// returns its id and the state JobDepsAdd left it in.
func (b *bundle) withParents(typ string, runAnyway bool, graph int64, parents ...int64) (int64, job.State) {
	b.t.Helper()
	var id int64
	var st job.State
	b.write(func(tx store.Tx) error {
		res, err := tx.JobInsertMany([]*store.JobInsertParams{b.job(typ)})
		if err != nil {
			return err
		}
		id = res[0].ID
		states, err := tx.JobDepsAdd([]*store.JobDepsParams{{Child: id, Parents: parents, RunAnyway: runAnyway, Graph: graph, Now: b.now}})
		if err == nil {
			st = states[0]
		}
		return err
	})
	return id, st
}

// succeedWith runs the parents of type typ to success through how, the store's ways of writing
// a success, in one write.
func (b *bundle) succeedWith(how string, typ string, n int) {
	b.t.Helper()
	jobs := b.lease(b.leaseParams(n, typ))
	var fs []*store.JobFinishParams
	for _, j := range jobs {
		b.start(refOf(j))
		fs = append(fs, b.finishParams(refOf(j), job.StateSucceeded))
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
}

// A dependent waits until its last parent succeeds, by every way a success is written, and is
// ready (PENDING, leasable) once the write that stores that success commits.
func testDepsReleasedBySuccess(t *testing.T, b *bundle) {
	for _, how := range []string{"JobFinish", "JobSucceedMany", "JobSucceedManyAtCommit"} {
		var parents []int64
		for range 6 { // JobSucceedMany writes fewer than a few one by one
			parents = append(parents, b.insert(b.job("p-" + how))[0])
		}
		child, st := b.withParents("c-"+how, false, 0, parents...)
		if st != job.StateWaiting || b.state(child) != job.StateWaiting {
			t.Fatalf("%s: child enqueued %s, stored %s; want WAITING", how, st, b.state(child))
		}
		if got := b.lease(b.leaseParams(1, "c-"+how)); len(got) != 0 {
			t.Fatalf("%s: a waiting job was leased", how)
		}
		b.succeedWith(how, "p-"+how, 5)
		if s := b.state(child); s != job.StateWaiting {
			t.Fatalf("%s: child is %s with a parent left", how, s)
		}
		b.succeedWith(how, "p-"+how, 1)
		if s := b.state(child); s != job.StatePending {
			t.Fatalf("%s: child is %s after its last parent succeeded, want PENDING", how, s)
		}
		if got := b.lease(b.leaseParams(1, "c-"+how)); len(got) != 1 || got[0].ID != child || got[0].Parents != 6 {
			t.Fatalf("%s: leased %v, want the child with 6 parents", how, got)
		}
	}
}

// A parent that dies cancels its dependent, naming it, and the dependent's own dependents in
// turn, in the same write; a dependent that runs anyway is released instead, and counts stay
// right.
func testDepsCancelledDownTheGraph(t *testing.T, b *bundle) {
	p := b.insert(b.job("p"))[0]
	child, _ := b.withParents("c", false, 0, p)
	grandchild, _ := b.withParents("c", false, 0, child)
	anyway, _ := b.withParents("a", true, 0, child)
	ref := b.leaseOne("p")
	b.start(ref)
	f := b.finishParams(ref, job.StateDead)
	f.DeadReason = job.DeadFatal
	b.finish(f)
	for _, c := range []struct {
		id     int64
		parent int64
		what   string
	}{{child, p, "DEAD"}, {grandchild, child, "CANCELLED"}} {
		j := b.get(c.id)
		if j.State != job.StateCancelled || j.LastErrorType != store.ParentFailedType ||
			j.LastErrorMessage != store.ParentFailedMessage(c.parent, map[string]job.State{"DEAD": job.StateDead, "CANCELLED": job.StateCancelled}[c.what]) {
			t.Fatalf("job %d is %s %q %q", c.id, j.State, j.LastErrorType, j.LastErrorMessage)
		}
		d, err := b.s.JobDepsGet(b.ctx, c.id)
		if err != nil || d.CancelledBy != c.parent {
			t.Fatalf("deps of %d = %+v, %v; want cancelled by %d", c.id, d, err, c.parent)
		}
	}
	if s := b.state(anyway); s != job.StatePending {
		t.Fatalf("the job that runs anyway is %s, want PENDING", s)
	}
	var cancelled int64
	for _, c := range b.counts() {
		if c.State == job.StateCancelled {
			cancelled += c.Count
		}
	}
	if cancelled != 2 {
		t.Fatalf("counts show %d CANCELLED, want 2", cancelled)
	}
	// A cancelled waiting job cancels its dependents too.
	q := b.insert(b.job("q"))[0]
	w1, _ := b.withParents("w", false, 0, q)
	w2, _ := b.withParents("w", false, 0, w1)
	b.write(func(tx store.Tx) error { _, err := tx.JobCancel(w1, b.now); return err })
	if b.state(w2) != job.StateCancelled || b.state(q) != job.StatePending {
		t.Fatalf("after cancelling a waiting job: dependent %s, parent %s", b.state(w2), b.state(q))
	}
}

// The waiting jobs a write's settling cancels, at every level, are told after its commit, and
// so are those a requeue revives (store.DependentsChangedNotifier): the broker's watches of
// them hear of it from there alone. A write that cancels none tells nothing.
func testDepsChangedTold(t *testing.T, b *bundle) {
	var told [][]int64 // called on the writing goroutine, within b.write
	b.s.OnDependentsChanged(func(ids []int64) { told = append(told, slices.Sorted(slices.Values(ids))) })
	q := b.insert(b.job("q"))[0]
	released, _ := b.withParents("r", false, 0, q)
	ref := b.leaseOne("q")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	if b.state(released) != job.StatePending || len(told) != 0 {
		t.Fatalf("a success that released a dependent told %v", told)
	}

	p := b.insert(b.job("p"))[0]
	child, _ := b.withParents("c", false, 0, p)
	grandchild, _ := b.withParents("c", false, 0, child)
	anyway, _ := b.withParents("a", true, 0, child)
	ref = b.leaseOne("p")
	b.start(ref)
	f := b.finishParams(ref, job.StateDead)
	f.DeadReason = job.DeadFatal
	b.finish(f)
	want := []int64{child, grandchild}
	if len(told) != 1 || !slices.Equal(told[0], want) || b.state(anyway) != job.StatePending {
		t.Fatalf("the parent's death told %v, want %v once", told, want)
	}
	b.write(func(tx store.Tx) error {
		_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{p}, RunAt: b.now, Now: b.now})
		return err
	})
	if len(told) != 2 || !slices.Equal(told[1], want) || b.state(grandchild) != job.StateWaiting {
		t.Fatalf("the requeue told %v, want %v revived", told[1:], want)
	}
}

// A success stored again (a repeated result) settles nothing twice: a child with two parents
// waits for the second.
func testDepsSettledOnce(t *testing.T, b *bundle) {
	p1 := b.insert(b.job("p"))[0]
	p2 := b.insert(b.job("p2"))[0]
	child, _ := b.withParents("c", false, 0, p1, p2)
	ref := b.leaseOne("p")
	b.start(ref)
	f := b.finishParams(ref, job.StateSucceeded)
	b.finish(f)
	b.finish(f) // the same success again, alone and with others
	b.write(func(tx store.Tx) error {
		return tx.JobSucceedManyAtCommit([]*store.JobFinishParams{f}, func([]bool, error) {})
	})
	b.write(func(tx store.Tx) error {
		_, err := tx.JobSucceedMany([]*store.JobFinishParams{f, f, f, f, f})
		return err
	})
	// Again with another parent's first success in the same write: its edge is settled, the
	// settled one is not settled again.
	q := b.insert(b.job("q"))[0]
	other, _ := b.withParents("c2", false, 0, q)
	refQ := b.leaseOne("q")
	b.start(refQ)
	b.write(func(tx store.Tx) error {
		_, err := tx.JobSucceedMany([]*store.JobFinishParams{f, b.finishParams(refQ, job.StateSucceeded)})
		return err
	})
	if s := b.state(child); s != job.StateWaiting {
		t.Fatalf("child is %s after one parent's success stored again, want WAITING", s)
	}
	d, _ := b.s.JobDepsGet(b.ctx, child)
	if d == nil || d.ParentsLeft != 1 {
		t.Fatalf("deps = %+v, want 1 parent left", d)
	}
	if s := b.state(other); s != job.StatePending {
		t.Fatalf("the other child is %s after its parent succeeded, want PENDING", s)
	}
}

// JobDepsAdd refuses a parent that does not exist, or one already DEAD or CANCELLED for a job
// that does not run anyway, and counts a parent already SUCCEEDED as done.
func testDepsAddRefuses(t *testing.T, b *bundle) {
	done := b.insert(b.job("d"))[0]
	ref := b.leaseOne("d")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	gone := b.insert(b.job("g"))[0]
	b.write(func(tx store.Tx) error { _, err := tx.JobCancel(gone, b.now); return err })
	try := func(runAnyway bool, parents ...int64) error {
		return b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
			res, err := tx.JobInsertMany([]*store.JobInsertParams{b.job("c")})
			if err != nil {
				return err
			}
			_, err = tx.JobDepsAdd([]*store.JobDepsParams{{Child: res[0].ID, Parents: parents, RunAnyway: runAnyway, Now: b.now}})
			return err
		})
	}
	var de *store.DepsError
	if err := try(false, done, 987654); !errors.As(err, &de) || de.Parent != 987654 || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown parent: %v", err)
	}
	if err := try(false, done, gone); !errors.As(err, &de) || de.Parent != gone || de.State != job.StateCancelled {
		t.Fatalf("cancelled parent: %v", err)
	}
	for _, c := range b.counts() {
		if c.Type == "c" {
			t.Fatalf("a refused job was stored: %+v", c)
		}
	}
	if _, st := b.withParents("c", false, 0, done); st != 0 {
		t.Fatalf("child of a SUCCEEDED parent left %s, want as inserted", st)
	}
	if _, st := b.withParents("c", true, 0, gone); st != 0 {
		t.Fatalf("run-anyway child of a CANCELLED parent left %s, want as inserted", st)
	}
}

// What the readers return: parents in the order named with their states and results,
// dependents by id, a graph's jobs, a WAITING count.
func testDepsReadBack(t *testing.T, b *bundle) {
	p1 := b.insert(b.job("p"))[0]
	p2 := b.insert(b.job("p"))[0]
	b.write(func(tx store.Tx) error {
		_, err := tx.JobDepsAdd([]*store.JobDepsParams{{Child: p1, Graph: p1, Now: b.now}, {Child: p2, Graph: p1, Now: b.now}})
		return err
	})
	child, _ := b.withParents("c", false, p1, p2, p1)
	ps, err := b.s.ParentResults(b.ctx, child)
	if err != nil || len(ps) != 2 || ps[0].ID != p2 || ps[1].ID != p1 || ps[0].Type != "p" || ps[0].State != job.StatePending {
		t.Fatalf("parents = %+v, %v", ps, err)
	}
	d, err := b.s.JobDepsGet(b.ctx, p1)
	if err != nil || !slices.Equal(d.Dependents, []int64{child}) || d.Graph != p1 {
		t.Fatalf("deps of a parent = %+v, %v", d, err)
	}
	if d, err := b.s.JobDepsGet(b.ctx, b.insert(b.job("lone"))[0]); d != nil || err != nil {
		t.Fatalf("deps of a lone job = %+v, %v; want none", d, err)
	}
	jobs, deps, err := b.s.GraphGet(b.ctx, p1)
	if err != nil || len(jobs) != 3 || jobs[2].ID != child || deps[child].ParentsLeft != 2 || jobs[2].State != job.StateWaiting {
		t.Fatalf("graph = %v, %v, %v", jobs, deps, err)
	}
	if _, _, err := b.s.GraphGet(b.ctx, 987654); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no graph: %v", err)
	}
	found := false
	for _, c := range b.counts() {
		found = found || (c.Type == "c" && c.State == job.StateWaiting && c.Count == 1)
	}
	if !found {
		t.Fatalf("counts %+v show no WAITING job", b.counts())
	}
}
