package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlite3 "modernc.org/sqlite/lib"
)

// busyBatches is a Retrier whose writes of several ops together ("batch") fail with
// SQLITE_BUSY, through the real retry policy (whose waits are an hour).
type busyBatches struct{ p *storeretry.Policy }

type busyCode struct{}

func (busyCode) Error() string { return "injected: database is locked" }
func (busyCode) Code() int     { return sqlite3.SQLITE_BUSY }

func (r busyBatches) Do(ctx context.Context, op string, fn func(context.Context) error) error {
	return r.p.Do(ctx, op, func(ctx context.Context) error {
		if op == "batch" {
			return busyCode{}
		}
		return fn(ctx)
	})
}

// When busy storage stops a batch's retries at the deadline of one caller, that caller is told,
// and the ops without a deadline in the same batch are committed again with the whole budget.
func TestDeadlineStopFailsOnlyTheOpsWithADeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Logger: slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 3, TransientRetryBaseDelay: time.Hour, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobwire.db"), sqlite.Options{Retry: busyBatches{p}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b, err := New(Options{Store: st, Config: DefaultConfig(), Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(typ string) func(tx store.Tx) error {
		return func(tx store.Tx) error {
			now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			_, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: typ, Queue: "q", MaxAttempts: 1, RunAt: now, Now: now}})
			return err
		}
	}
	errs := make([]error, 2)
	withDeadline := &op{name: "enqueue", apply: insert("caller"), deadline: time.Now().Add(10 * time.Second),
		done: func(err error) { errs[0] = err }}
	without := &op{name: "result", apply: insert("worker"), done: func(err error) { errs[1] = err }}
	b.commit([]*op{withDeadline, without})

	var busy *storeretry.BusyError
	if !errors.As(errs[0], &busy) || !busy.StoppedForDeadline() {
		t.Errorf("op with a deadline: %v; want retries stopped for the deadline", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("op without a deadline: %v; want it committed", errs[1])
	}
	jobs, err := st.JobList(ctx, &store.JobListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Type != "worker" {
		t.Fatalf("stored %v, want only the op without a deadline's job", jobs)
	}
}
