package broker

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
)

// manyCounter is a transaction that counts its calls of the writes of many.
type manyCounter struct {
	store.Tx
	calls map[string][]int // method: the length of each call
}

func (c *manyCounter) JobStartMany(ps []*store.JobStartParams) ([]bool, error) {
	c.calls["JobStartMany"] = append(c.calls["JobStartMany"], len(ps))
	return c.Tx.JobStartMany(ps)
}

func (c *manyCounter) JobSucceedMany(ps []*store.JobFinishParams) ([]bool, error) {
	c.calls["JobSucceedMany"] = append(c.calls["JobSucceedMany"], len(ps))
	return c.Tx.JobSucceedMany(ps)
}

func (c *manyCounter) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	c.calls["JobSucceedMany"] = append(c.calls["JobSucceedMany"], len(ps))
	return c.Tx.JobSucceedManyAtCommit(ps, got)
}

func (c *manyCounter) JobStart(p *store.JobStartParams) (bool, error) {
	c.calls["JobStart"] = append(c.calls["JobStart"], 1)
	return c.Tx.JobStart(p)
}

// openStore opens a SQLite store in t's temporary directory, closed when t ends.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobwire.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A batch's starts and successes are written one call per kind, each op gets its own outcome
// (a stale lease is refused alone), and a superseded start writes nothing.
func TestGroupedWritesOneCallPerKind(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	now := time.Unix(1_700_000_000, 0)
	var leased []*job.Job
	err := st.Write(ctx, "setup", func(tx store.Tx) error {
		var ps []*store.JobInsertParams
		for range 7 {
			ps = append(ps, &store.JobInsertParams{Type: "t", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
				RunAt: now, Now: now, AttemptTimeout: time.Minute})
		}
		if _, err := tx.JobInsertMany(ps); err != nil {
			return err
		}
		var err error
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 7, WorkerID: "w", Now: now,
			LeaseUntil: now.Add(time.Minute)})
		return err
	})
	if err != nil || len(leased) != 7 {
		t.Fatalf("leased %d jobs: %v", len(leased), err)
	}
	ref := func(i int) job.LeaseRef { return job.LeaseRef{JobID: leased[i].ID, Token: leased[i].LeaseToken} }
	stale := ref(0)
	stale.Token.Seq += 5
	// Each op can also write alone, as the broker's can, so that one left out of its group
	// shows in the counts.
	start := func(r job.LeaseRef) *op {
		o := &op{starts: r, start: &store.JobStartParams{Ref: r, Attempt: 1, Now: now,
			LeaseUntil: now.Add(time.Minute), AttemptDeadline: now.Add(time.Minute)}}
		o.apply = func(tx store.Tx) (err error) { o.applied, err = tx.JobStart(o.start); return err }
		return o
	}
	succeed := func(r job.LeaseRef) *op {
		return &op{finishes: r, succeed: &store.JobFinishParams{Ref: r, Queue: "default", Type: "t",
			State: job.StateSucceeded, Now: now, Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: now,
				FinishedAt: now, Outcome: job.OutcomeSucceeded}}}
	}
	superseded := start(ref(6))
	superseded.superseded = true
	superseded.apply = func(store.Tx) error { superseded.applied = true; return nil }
	batch := []*op{start(ref(0)), start(ref(1)), start(ref(2)), succeed(ref(3)), start(ref(4)), start(stale),
		succeed(ref(5)), superseded, succeed(ref(6))}
	counter := &manyCounter{calls: map[string][]int{}}
	var g grouped
	err = st.Write(ctx, "batch", func(tx store.Tx) error {
		counter.Tx = tx
		return g.apply(counter, batch)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"JobStartMany": {5}, "JobSucceedMany": {3}}
	for m, n := range want {
		if !slices.Equal(counter.calls[m], n) {
			t.Errorf("%s calls %v, want %v", m, counter.calls[m], n)
		}
	}
	if len(counter.calls) != len(want) {
		t.Errorf("calls %v, want only %v", counter.calls, want)
	}
	var outcomes []bool
	for _, o := range batch {
		outcomes = append(outcomes, o.applied || o.succeeded)
	}
	if wantOut := []bool{true, true, true, true, true, false, true, true, true}; !slices.Equal(outcomes, wantOut) {
		t.Fatalf("outcomes %v, want %v (only the stale start refused)", outcomes, wantOut)
	}
}

func (c *manyCounter) JobInsertMany(ps []*store.JobInsertParams) ([]store.JobInsertResult, error) {
	c.calls["JobInsertMany"] = append(c.calls["JobInsertMany"], len(ps))
	return c.Tx.JobInsertMany(ps)
}

// The jobs of a batch's enqueues are inserted with one call, and each enqueue gets the results
// of its own jobs, in its order.
func TestGroupedEnqueuesInsertWithOneCall(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	now := time.Unix(1_700_000_000, 0)
	enqueue := func(types ...string) (*op, *[]store.JobInsertResult) {
		var got []store.JobInsertResult
		o := &op{}
		for _, typ := range types {
			o.insert = append(o.insert, &store.JobInsertParams{Type: typ, Queue: "default", Payload: []byte(`{}`),
				MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute})
		}
		o.inserted = func(_ store.Tx, rs []store.JobInsertResult) { got = rs }
		return o, &got
	}
	a, gotA := enqueue("a1", "a2")
	b, gotB := enqueue("b1", "b2", "b3")
	counter := &manyCounter{calls: map[string][]int{}}
	var g grouped
	err := st.Write(ctx, "batch", func(tx store.Tx) error {
		counter.Tx = tx
		g.reset()
		for _, o := range []*op{a, b} {
			if !g.add(o) {
				t.Fatal("an enqueue without idempotency keys was not grouped")
			}
		}
		return g.write(counter)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{5}; !slices.Equal(counter.calls["JobInsertMany"], want) {
		t.Fatalf("JobInsertMany calls %v, want %v", counter.calls["JobInsertMany"], want)
	}
	for _, c := range []struct {
		got   []store.JobInsertResult
		types []string
	}{{*gotA, []string{"a1", "a2"}}, {*gotB, []string{"b1", "b2", "b3"}}} {
		if len(c.got) != len(c.types) {
			t.Fatalf("results %v for jobs %v", c.got, c.types)
		}
		for i, r := range c.got {
			j, err := st.JobGet(ctx, r.ID)
			if err != nil || j.Type != c.types[i] {
				t.Fatalf("result %d of %v is job %d (%v, %v)", i, c.types, r.ID, j, err)
			}
		}
	}
}

// lostAnswer is a store whose first success sent with COMMIT is stored but never answered, as
// when the connection is lost with the answer of a COMMIT that went through.
type lostAnswer struct {
	store.Store
	lost atomic.Bool
}

func (s *lostAnswer) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(&lostAnswerTx{Tx: tx, s: s}) })
}

type lostAnswerTx struct {
	store.Tx
	s *lostAnswer
}

func (tx *lostAnswerTx) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	if tx.s.lost.CompareAndSwap(false, true) {
		_, err := tx.Tx.JobSucceedMany(ps)
		return err
	}
	return tx.Tx.JobSucceedManyAtCommit(ps, got)
}

// A success whose answer was lost is refused as storage's failure, not as a stale lease, so its
// worker sends it again; the second time it is found stored and acknowledged.
func TestSuccessWithLostAnswerIsSentAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &lostAnswer{Store: openStore(t)}
	b, err := New(Options{Store: st, Config: DefaultConfig(), Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.WithoutCancel(ctx)) })
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	a := assignments(t, s, 1)[0]
	ref := job.LeaseRef{JobID: a.Job.ID, Token: a.Token}
	answer := func() Message {
		t.Helper()
		s.Result(ref, nil)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			msgs, err := s.Next(wctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				switch m.(type) {
				case Refused, ResultAck:
					return m
				}
			}
		}
	}
	if m, ok := answer().(Refused); !ok || m.Reason != RefusedBusy {
		t.Fatalf("a success whose answer was lost got %#v, want a refusal that asks to send it again", m)
	}
	if m, ok := answer().(ResultAck); !ok {
		t.Fatalf("the success sent again got %#v, want it acknowledged", m)
	}
	if j, err := b.Get(ctx, ref.JobID); err != nil || j.State != job.StateSucceeded || j.Attempts != 1 {
		t.Fatalf("job after the success sent twice: %+v, %v", j, err)
	}
}
