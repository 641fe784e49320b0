package postgres

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
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

// A keyed lease that applies rate limits takes the limits' rows before the keys' lock (steps 5
// and 7 of the lock order, lockorder.go): while it waits for the rows another broker's lease
// holds, it holds no keys' lock, so a keyed lease without rate limits goes meanwhile. Taking
// the keys' lock first would hold every keyed lease of every broker behind those rows, and
// close a cycle with a lease that holds the keys' lock and then wants the rows.
func TestKeyedRatedLeaseLocksTheLimitsBeforeTheKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	var stores [3]*Store
	for i := range stores {
		st, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	holder, rated, plain := stores[0], stores[1], stores[2]
	now := time.Unix(1_700_000_000, 0)
	if err := holder.Write(ctx, "setup", func(tx store.Tx) error {
		if err := tx.RateLimitPut(store.RateLimitRecord{Rule: ratelimit.Rule{Name: "t", Type: "t",
			Limit: ratelimit.Limit{Rate: 100, Per: time.Second, Burst: 100}}, UpdatedAt: now}); err != nil {
			return err
		}
		var ps []*store.JobInsertParams
		for _, typ := range []string{"t", "other"} {
			ps = append(ps, &store.JobInsertParams{Type: typ, Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
				RunAt: now, Now: now, AttemptTimeout: time.Minute, Concurrency: store.Concurrency{Key: typ, Limit: 1}})
		}
		_, err := tx.JobInsertMany(ps)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lease := func(tx store.Tx, typ string, keyed, rates bool) ([]*job.Job, error) {
		p := &store.JobLeaseParams{Types: []string{typ}, Limit: 4, Keyed: keyed, EnforceQueues: true,
			WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)}
		if rates {
			p.Rates = &store.RateLease{}
		}
		return tx.JobLease(p)
	}
	pidOf := func(stx store.Tx) int {
		var pid int
		if err := stx.(*tx).tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Error(err)
		}
		return pid
	}
	blockedBy := func(pid, by int) bool {
		var blocked bool
		err := holder.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE pid = $1 AND $2 = ANY(pg_blocking_pids(pid)))`, pid, by).Scan(&blocked)
		return err == nil && blocked
	}
	anyBlocking := func(pid int) bool {
		var blocked bool
		err := holder.pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pid).Scan(&blocked)
		return err == nil && blocked
	}

	// The holder, a lease without keys that applies the limits, keeps their rows locked.
	holding, release := make(chan int, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo()
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- holder.Write(ctx, "holder", func(stx store.Tx) error {
			_, err := lease(stx, "t", false, true)
			holding <- pidOf(stx)
			<-release
			return err
		})
	}()
	holderPID := <-holding

	ratedPID, ratedDone := make(chan int, 1), make(chan error, 1)
	var ratedJobs []*job.Job
	go func() {
		ratedDone <- rated.Write(ctx, "keyed and rated", func(stx store.Tx) error {
			select {
			case ratedPID <- pidOf(stx):
			default: // a retry
			}
			var err error
			ratedJobs, err = lease(stx, "t", true, true)
			return err
		})
	}()
	rpid := <-ratedPID
	waitFor(t, "the keyed, rated lease to wait for the limits' rows", func() bool { return blockedBy(rpid, holderPID) })

	plainPID, plainDone := make(chan int, 1), make(chan error, 1)
	var plainJobs []*job.Job
	go func() {
		plainDone <- plain.Write(ctx, "keyed", func(stx store.Tx) error {
			select {
			case plainPID <- pidOf(stx):
			default:
			}
			var err error
			plainJobs, err = lease(stx, "other", true, false)
			return err
		})
	}()
	ppid := <-plainPID
	var plainErr error
	waitFor(t, "the keyed lease without limits to end or wait", func() bool {
		select {
		case plainErr = <-plainDone:
			return true
		default:
			if anyBlocking(ppid) {
				t.Fatalf("a keyed lease without limits waits for %d while a keyed, rated lease waits for the limits' rows: the rated lease took the keys' lock first", rpid)
			}
			return false
		}
	})
	if plainErr != nil || len(plainJobs) != 1 {
		t.Fatalf("keyed lease without limits: %v, %d jobs; want its one job", plainErr, len(plainJobs))
	}
	letGo()
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	if err := <-ratedDone; err != nil || len(ratedJobs) != 1 {
		t.Fatalf("keyed, rated lease: %v, %d jobs; want its one job once the rows are free", err, len(ratedJobs))
	}
}

// The keys' lock is the schema's: a keyed lease of one schema never waits for a keyed lease of
// another schema of the same database, as brokers of two schemas share nothing else. The lock
// once had one key for the whole database.
func TestKeysLockIsTheSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var stores [2]*Store
	for i := range stores {
		st, err := Open(ctx, pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	now := time.Unix(1_700_000_000, 0)
	lease := func(stx store.Tx) ([]*job.Job, error) {
		if _, err := stx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute,
			Concurrency: store.Concurrency{Key: "k", Limit: 1}}}); err != nil {
			return nil, err
		}
		return stx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 1, Keyed: true, WorkerID: "w",
			Now: now, LeaseUntil: now.Add(time.Minute)})
	}
	holding, release := make(chan error, 1), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- stores[0].Write(ctx, "holder", func(stx store.Tx) error {
			_, err := lease(stx)
			holding <- err
			<-release
			return err
		})
	}()
	if err := <-holding; err != nil {
		close(release)
		t.Fatal(err)
	}
	otherPID := make(chan int, 1)
	otherDone := make(chan error, 1)
	var leased []*job.Job
	go func() {
		otherDone <- stores[1].Write(ctx, "other schema", func(stx store.Tx) error {
			var pid int
			if err := stx.(*tx).tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			select {
			case otherPID <- pid:
			default: // a retry
			}
			var err error
			leased, err = lease(stx)
			return err
		})
	}()
	pid := <-otherPID
	var err error
	waitFor(t, "the other schema's keyed lease to end or wait", func() bool {
		select {
		case err = <-otherDone:
			return true
		default:
			var waits bool
			if qerr := stores[1].pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pid).Scan(&waits); qerr == nil && waits {
				close(release)
				<-holderDone
				t.Fatal("a keyed lease waits for the keyed lease of another schema")
			}
			return false
		}
	})
	close(release)
	if hErr := <-holderDone; hErr != nil {
		t.Fatal(hErr)
	}
	if err != nil || len(leased) != 1 {
		t.Fatalf("other schema's keyed lease: %v, %d jobs; want its one job", err, len(leased))
	}
}
