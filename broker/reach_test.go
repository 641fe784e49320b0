package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
	"github.com/jobwire/jobwire/store/storeretry"
)

// holdFirst is a Retrier whose first try of op waits, before its transaction begins, until
// release is closed: a database that stopped answering.
type holdFirst struct {
	p                *storeretry.Policy
	op               string
	entered, release chan struct{}
	held             chan struct{} // holds one token: the try to hold
}

func (r holdFirst) Do(ctx context.Context, op string, fn func(context.Context) error) error {
	if op == r.op {
		select {
		case <-r.held:
			close(r.entered)
			<-r.release
		default:
		}
	}
	return r.p.Do(ctx, op, fn)
}

// When the database has been silent for the bound, an enqueue the writer has taken is answered
// as maybe applied, and one still queued behind it is withdrawn: answered as not applied, and
// never written, also once the database answers again.
func TestSilentDatabaseWithdrawsQueuedEnqueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Logger: slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 3, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	r := holdFirst{p: p, op: "enqueue", entered: make(chan struct{}), release: make(chan struct{}), held: make(chan struct{}, 1)}
	st, err := sqlite.Open(ctx, sqlitetest.Path(t), sqlite.Options{Retry: r})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	b, err := New(Options{Store: st, Commit: testCommit, Config: DefaultConfig(), Clock: clk, DatabaseSilence: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	startForTest(t, b, st.Close)
	defer close(r.release)

	enqueue := func(typ string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := b.Enqueue(ctx, []JobSpec{{Type: typ}})
			errc <- err
		}()
		return errc
	}
	answer := func(what string, errc <-chan error) error {
		t.Helper()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", what)
			return nil
		}
	}
	r.held <- struct{}{}
	taken := enqueue("taken")
	<-r.entered
	queued := enqueue("queued")
	waitUntil(t, "the second enqueue to queue behind the first", func() bool { return b.writing.writer.Queued() == 1 })

	clk.Advance(time.Second)
	var u *UnreachableError
	if err := answer("the taken enqueue", taken); !errors.As(err, &u) || !u.MaybeApplied {
		t.Fatalf("the taken enqueue: %v, want an *UnreachableError that may have been applied", err)
	}
	if err := answer("the queued enqueue", queued); !errors.As(err, &u) || u.MaybeApplied {
		t.Fatalf("the queued enqueue: %v, want an *UnreachableError that was not applied", err)
	}

	r.release <- struct{}{}
	waitUntil(t, "the broker to reach its database again", func() bool { return b.Unreachable() == nil })
	// Written after the withdrawn one was read off the writer's queue.
	if err := answer("an enqueue after", enqueue("after")); err != nil {
		t.Fatal(err)
	}
	jobs, err := b.ListJobs(ctx, JobFilter{}, ListOrder{Asc: true}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, j := range jobs {
		types = append(types, j.Type)
	}
	if len(types) != 2 || types[0] != "taken" || types[1] != "after" {
		t.Fatalf("stored jobs of types %q, want [taken after]", types)
	}
}
