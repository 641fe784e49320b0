package commit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
)

var errStopped = errors.New("stopped")

// writerBundle is a running writer of one kind and what a test reads it through.
type writerBundle struct {
	w     Writer
	st    store.Store
	owner *recordingOwner
}

// recordingOwner records the steps of each write, and plans a round (a "round" op) when asked
// or when a batch makes jobs ready.
type recordingOwner struct {
	mu    sync.Mutex
	steps []string
}

func (o *recordingOwner) record(step string) {
	o.mu.Lock()
	o.steps = append(o.steps, step)
	o.mu.Unlock()
}

func (o *recordingOwner) Steps() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.steps)
}

func (o *recordingOwner) Round(_ []Op, asked, ready bool) Op {
	if !asked && !ready {
		return nil
	}
	return &funcOp{name: "round", apply: func(store.Tx) error { o.record("round"); return nil }}
}
func (o *recordingOwner) Begin(store.Tx, []Op) {}
func (o *recordingOwner) Flush(store.Tx) error { o.record("flush"); return nil }
func (o *recordingOwner) Written([]Op, error)  {}

// newWriter makes a writer of one kind from cfg.
type newWriter func(cfg Config) Writer

// testWriter runs the behaviour every writer must have against the writer newWriter makes, as
// River's completers run one suite: Grouped must do all that Plain, the reference, does.
func testWriter(t *testing.T, newWriter newWriter) {
	setup := func(t *testing.T) *writerBundle {
		t.Helper()
		stop := make(chan struct{})
		b := &writerBundle{st: openStore(t, sqlite.Options{}), owner: &recordingOwner{}}
		b.w = newWriter(Config{Store: b.st, Ctx: context.Background(), MaxBatch: 16, Owner: b.owner, Stop: stop,
			Stopped: errStopped})
		var wg sync.WaitGroup
		wg.Go(b.w.Run)
		t.Cleanup(func() { close(stop); wg.Wait() })
		return b
	}
	wait := func(t *testing.T, tk *Ticket) error {
		t.Helper()
		select {
		case err := <-tk.Answer():
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
			return nil
		}
	}

	t.Run("AnswersOnlyOnceCommitted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seen, told := errors.New("never told"), 0
		o := &toldInsert{insertOp: newInsert("t")}
		o.told = func(error) {
			// Another connection sees the job when its own op is first told.
			if told++; told == 1 {
				_, seen = b.st.JobGet(context.Background(), o.results[0].ID)
			}
		}
		if err := wait(t, b.w.Enter(o, time.Time{})); err != nil || seen != nil || told != 1 {
			t.Fatalf("told %v (%d times), job read %v: want it stored before the op is told, once", err, told, seen)
		}
	})

	t.Run("FailingOpFailsAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		blocker := b.w.Enter(&funcOp{name: "block", apply: func(store.Tx) error { <-release; return nil }}, time.Time{})
		failing := errors.New("refused")
		ops := []*insertOp{newInsert("a"), newInsert("b")}
		tickets := []*Ticket{b.w.Enter(ops[0], time.Time{}),
			b.w.Enter(&funcOp{name: "bad", apply: func(store.Tx) error { return failing }}, time.Time{}),
			b.w.Enter(ops[1], time.Time{})}
		close(release)
		if err := wait(t, blocker); err != nil {
			t.Fatal(err)
		}
		for i, want := range []error{nil, failing, nil} {
			if err := wait(t, tickets[i]); !errors.Is(err, want) {
				t.Errorf("op %d told %v, want %v", i, err, want)
			}
		}
		for _, o := range ops {
			if len(o.results) != 1 {
				t.Fatalf("an op beside the failing one stored %v", o.results)
			}
			if _, err := b.st.JobGet(context.Background(), o.results[0].ID); err != nil {
				t.Errorf("job of an op beside the failing one: %v", err)
			}
		}
	})

	t.Run("WithdrawnOpIsNotApplied", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		blocker := b.w.Enter(&funcOp{name: "block", apply: func(store.Tx) error { <-release; return nil }}, time.Time{})
		for b.w.Queued() > 0 { // the blocker is taken
			time.Sleep(time.Millisecond)
		}
		applied := false
		tk := b.w.Enter(&funcOp{name: "late", apply: func(store.Tx) error { applied = true; return nil }}, time.Time{})
		if !tk.Withdraw() {
			t.Fatal("an op still queued could not be withdrawn")
		}
		close(release)
		if err := wait(t, blocker); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, b.w.Enter(&funcOp{name: "after"}, time.Time{})); err != nil || applied {
			t.Fatalf("after a withdrawn op: %v, applied %v", err, applied)
		}
	})

	t.Run("StopAnswersQueuedOps", func(t *testing.T) {
		t.Parallel()
		stop := make(chan struct{})
		release := make(chan struct{})
		w := newWriter(Config{Store: openStore(t, sqlite.Options{}), Ctx: context.Background(), MaxBatch: 1,
			Owner: nobody{}, Stop: stop, Stopped: errStopped})
		var wg sync.WaitGroup
		wg.Go(w.Run)
		blocker := w.Enter(&funcOp{name: "block", apply: func(store.Tx) error { <-release; return nil }}, time.Time{})
		for w.Queued() > 0 {
			time.Sleep(time.Millisecond)
		}
		queued := w.Enter(&funcOp{name: "queued"}, time.Time{})
		close(stop)
		close(release)
		wg.Wait()
		if err := wait(t, blocker); err != nil {
			t.Errorf("the op being written: %v", err)
		}
		// Written if the writer took it before it saw the stop; never left unanswered.
		if err := wait(t, queued); err != nil && !errors.Is(err, errStopped) {
			t.Errorf("an op queued at stop: %v, want it written or %v", err, errStopped)
		}
		if err := wait(t, w.Enter(&funcOp{name: "late"}, time.Time{})); !errors.Is(err, errStopped) {
			t.Errorf("an op entered after stop: %v, want %v", err, errStopped)
		}
	})

	t.Run("RoundFollowsReadyJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := wait(t, b.w.Enter(newInsert("a"), time.Time{})); err != nil {
			t.Fatal(err)
		}
		// Grouped writes the round in the insert's transaction; Plain right after it.
		if err := wait(t, b.w.Enter(&funcOp{name: "after"}, time.Time{})); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(b.owner.Steps(), "round") {
			t.Fatalf("steps %v: no round after an op that made jobs ready", b.owner.Steps())
		}
	})

	t.Run("QueueLockersApplyAfterFlush", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := &lockingOp{funcOp{name: "queue_change", apply: func(store.Tx) error { b.owner.record("locks"); return nil }}}
		if err := wait(t, b.w.Enter(o, time.Time{})); err != nil {
			t.Fatal(err)
		}
		if got := b.owner.Steps(); !slices.Equal(got, []string{"flush", "locks"}) {
			t.Fatalf("steps %v, want the flush before the op that locks queues", got)
		}
	})

	t.Run("AtCommitReadsAreAnswered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if err := wait(t, b.w.Enter(newInsert("t", "t", "t"), time.Time{})); err != nil {
			t.Fatal(err)
		}
		o := &leaseAtCommitOp{limits: []int{2, 2}}
		if err := wait(t, b.w.Enter(o, time.Time{})); err != nil {
			t.Fatal(err)
		}
		if len(o.jobs) != 2 || len(o.jobs[0]) != 2 || len(o.jobs[1]) != 1 {
			t.Fatalf("leases at commit got %v, want 2 jobs then the 1 left", o.jobs)
		}
	})
}

// lockingOp is an op that locks queues.
type lockingOp struct{ funcOp }

func (o *lockingOp) LocksQueues() bool { return true }

// leaseAtCommitOp leases jobs of type "t" for workers of limits, one scope, at commit.
type leaseAtCommitOp struct {
	limits []int
	jobs   [][]*job.Job
}

func (o *leaseAtCommitOp) Name() string         { return "lease" }
func (o *leaseAtCommitOp) Apply(store.Tx) error { return nil }
func (o *leaseAtCommitOp) Done(error)           {}
func (o *leaseAtCommitOp) AtCommit() Reads {
	var ps []*store.JobLeaseParams
	for i, n := range o.limits {
		ps = append(ps, &store.JobLeaseParams{Types: []string{"t"}, Limit: n, WorkerID: string(rune('a' + i)),
			Now: testNow, LeaseUntil: testNow.Add(time.Minute)})
	}
	return Reads{Leases: [][]*store.JobLeaseParams{ps}, Leased: func(_ int, jobs [][]*job.Job, err error) {
		if err == nil {
			o.jobs = jobs
		}
	}}
}

func TestGrouped(t *testing.T) {
	t.Parallel()
	testWriter(t, func(cfg Config) Writer { return NewGrouped(cfg) })
}

func TestPlain(t *testing.T) {
	t.Parallel()
	testWriter(t, func(cfg Config) Writer { return NewPlain(cfg) })
}
