package broker

import (
	"context"
	"log/slog"

	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// openStore opens a SQLite store in t's temporary directory, closed when t ends.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
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
	onlyGroupCommit(t)
	ctx := context.Background()
	st := &lostAnswer{Store: openStore(t)}
	b, err := New(Options{Store: st, Commit: testCommit, Config: DefaultConfig(), Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)),
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
