package postgres

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// A keyed lease through a second store waits for the first's transaction, which holds the
// keys' lock, and then counts what the first leased: two brokers leasing at once never fill one
// key's room twice. Without the lock both counted the key empty and each took its limit.
func TestKeyedLeaseWaitsForConcurrentLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	var a, b *Store
	for _, s := range []**Store{&a, &b} {
		st, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		*s = st
	}
	now := time.Unix(1_700_000_000, 0)
	var ps []*store.JobInsertParams
	for range 6 {
		ps = append(ps, &store.JobInsertParams{Type: "t", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute, Concurrency: store.Concurrency{Key: "acme", Limit: 2}})
	}
	if err := a.Write(ctx, "setup", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err }); err != nil {
		t.Fatal(err)
	}
	lease := func(tx store.Tx) ([]*job.Job, error) {
		return tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 4, Keyed: true, EnforceQueues: true,
			WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	}
	type held struct{ jobs, pid int }
	holding, release := make(chan held, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo()
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- a.Write(ctx, "first", func(stx store.Tx) error {
			jobs, err := lease(stx)
			var pid int
			if err == nil {
				err = stx.(*tx).tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
			}
			holding <- held{len(jobs), pid}
			<-release // keep the transaction open until the second lease waits
			return err
		})
	}()
	first := <-holding
	if first.jobs != 2 {
		t.Fatalf("first lease took %d jobs, want 2 (the key's limit)", first.jobs)
	}
	var second []*job.Job
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- b.Write(ctx, "second", func(tx store.Tx) error {
			var err error
			second, err = lease(tx)
			return err
		})
	}()
	waitFor(t, "the second lease to wait for the first", func() bool {
		select {
		case err := <-secondDone:
			t.Fatalf("the second lease finished (%v, %d jobs) while the first held the key's room", err, len(second))
		default:
		}
		var waiting bool
		err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)))`, first.pid).Scan(&waiting)
		return err == nil && waiting
	})
	letGo()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 {
		t.Fatalf("second lease took %v while the key's 2 slots were held, want none", ids(second))
	}
}
