package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// deadlockDB is a database of a test's own on the test server, so that the server's count of
// the deadlocks it broke there (pg_stat_database.deadlocks) is the test's alone.
type deadlockDB struct {
	t    *testing.T
	base string // the server's URL
	name string
	url  string // the database's
}

func newDeadlockDB(t *testing.T) *deadlockDB {
	t.Helper()
	return newDeadlockDBWith(t, "")
}

// newDeadlockDBWith is newDeadlockDB, the database created with options (CREATE DATABASE's).
func newDeadlockDBWith(t *testing.T, options string) *deadlockDB {
	t.Helper()
	base := pgtest.ServerURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	d := &deadlockDB{t: t, base: base, name: "jobwire_deadlock_" + hex.EncodeToString(b[:])}
	d.admin(`CREATE DATABASE ` + d.name + ` ` + options)
	t.Cleanup(func() { d.admin(`DROP DATABASE ` + d.name + ` WITH (FORCE)`) })
	// A deadlock costs its victim deadlock_timeout before the server looks for it: shorter, the
	// test is quicker on the code it must fail on. Only a superuser may change it; the test
	// runs as well without (slower).
	d.exec(`ALTER DATABASE ` + d.name + ` SET deadlock_timeout = '100ms'`)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + d.name
	d.url = u.String()
	return d
}

// exec runs sql on the server's own database and reports whether it succeeded.
func (d *deadlockDB) exec(sql string, args ...any) bool {
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		d.t.Errorf("connect to the test server: %v", err)
		return false
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err == nil
}

// admin runs sql on the server's own database and fails the test if it fails.
func (d *deadlockDB) admin(sql string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		d.t.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// count runs a query of one number on the server's own database.
func (d *deadlockDB) count(sql string) int64 {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		d.t.Fatalf("connect to the test server: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, d.name).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waiting reports how many of the database's sessions wait for a lock.
func (d *deadlockDB) waiting() int64 {
	return d.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`)
}

// deadlocks closes stores and returns how many deadlocks the server broke in the database. A
// session reports its count when it ends: the count is read once every session is gone.
func (d *deadlockDB) deadlocks(stores ...*Store) int64 {
	d.t.Helper()
	for _, s := range stores {
		_ = s.Close()
	}
	waitFor(d.t, "the stores' sessions to end", func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1`) == 0
	})
	return d.count(`SELECT deadlocks FROM pg_stat_database WHERE datname = $1`)
}

// deadlockJobs inserts n jobs of queue q into s and leases them, failing the test on an error.
func deadlockJobs(t *testing.T, s *Store, now time.Time, queues ...string) []*job.Job {
	t.Helper()
	var ps []*store.JobInsertParams
	for _, q := range queues {
		ps = append(ps, &store.JobInsertParams{Type: "t", Queue: q, Payload: []byte(`{}`), MaxAttempts: 1,
			RunAt: now, Now: now, AttemptTimeout: time.Minute})
	}
	var leased []*job.Job
	err := s.Write(context.Background(), "setup", func(tx store.Tx) error {
		if _, err := tx.JobInsertMany(ps); err != nil {
			return err
		}
		var err error
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: len(ps), WorkerID: "w",
			Now: now, LeaseUntil: now.Add(time.Hour)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != len(ps) {
		t.Fatalf("leased %d of %d jobs", len(leased), len(ps))
	}
	return leased
}

// failJob ends j's only attempt: it goes to the dead-letter queue, and to the finished totals.
func failJob(tx store.Tx, j *job.Job, now time.Time) error {
	a := job.Attempt{Number: 1, WorkerID: "w", StartedAt: now, FinishedAt: now, Outcome: job.OutcomeFailed,
		FailureKind: job.KindFatal, ErrorType: "Bad", Message: "bad input"}
	ok, err := tx.JobFinish(&store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
		Queue: j.Queue, Type: j.Type, State: job.StateDead, DeadReason: job.DeadFatal, Attempt: a, Now: now})
	if err == nil && !ok {
		err = fmt.Errorf("the failure of job %d was refused", j.ID)
	}
	return err
}

// noStoreDeadlocks fails the test if a store retried a transaction the server aborted as
// deadlocked.
func noStoreDeadlocks(t *testing.T, stores ...*Store) {
	t.Helper()
	for i, s := range stores {
		if n := s.StorageRetries()["40P01"]; n != 0 {
			t.Errorf("broker %d retried %d transactions aborted as deadlocked (40P01), want none", i, n)
		}
	}
}

// Two brokers' transactions, each failing jobs of two queues, the one in the other's order,
// never wait for each other in a cycle: each adds to the finished totals in one pass, in one
// order, at the end of its jobs' writes. Before, each failure's row of the totals was locked
// where the failure came in the transaction, and the two deadlocked.
func TestFinishedTotalsInOneOrder(t *testing.T) {
	t.Parallel()
	d := newDeadlockDB(t)
	brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
	now := time.Unix(1_700_000_000, 0)
	const rounds = 3
	for round := range rounds {
		jobs := deadlockJobs(t, brokers[0], now, "q1", "q2", "q2", "q1")
		var both sync.WaitGroup // each transaction has failed both its jobs
		both.Add(2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range brokers {
			first := true
			wg.Go(func() {
				errs[i] = s.Write(context.Background(), "fail", func(tx store.Tx) error {
					for _, j := range jobs[2*i : 2*i+2] {
						if err := failJob(tx, j, now); err != nil {
							return err
						}
					}
					if first {
						// Each holds, by now, what its failures locked before the last one.
						first = false
						both.Done()
						both.Wait()
					}
					return nil
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, broker %d: %v", round, i, err)
			}
		}
	}
	noStoreDeadlocks(t, brokers...)
	if n := d.deadlocks(brokers...); n != 0 {
		t.Errorf("the server broke %d deadlocks between the brokers' failures, want none", n)
	}
}

// A broker's transaction that fails a job and then enqueues a job with an idempotency key,
// which another broker's open transaction has just inserted, waits for that transaction to end;
// that one, failing a job of the same queue and type, must not wait for the first in turn. The
// finished totals are written at the end of a transaction's jobs' writes, after its enqueues,
// so the first holds no row of them while it waits for the key. (A producer that retries an
// enqueue at another broker sends the same key to two brokers at once.)
func TestEnqueueWaitingForAKeyHoldsNoTotals(t *testing.T) {
	t.Parallel()
	d := newDeadlockDB(t)
	brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
	now := time.Unix(1_700_000_000, 0)
	const rounds = 3
	for round := range rounds {
		jobs := deadlockJobs(t, brokers[0], now, "q", "q")
		key := &store.JobInsertParams{Type: "t", Queue: "q", Payload: []byte(`{}`), MaxAttempts: 1, RunAt: now,
			Now: now, AttemptTimeout: time.Minute, IdempotencyKey: fmt.Sprintf("key-%d", round)}
		inserted, goOn := make(chan struct{}), make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		// Broker 1 inserts the key, then, once broker 0 waits for it, fails a job and commits.
		wg.Go(func() {
			first := true
			errs[1] = brokers[1].Write(context.Background(), "enqueue_then_fail", func(tx store.Tx) error {
				if _, err := tx.JobInsertMany([]*store.JobInsertParams{key}); err != nil {
					return err
				}
				if first {
					first = false
					close(inserted)
					<-goOn
				}
				return failJob(tx, jobs[1], now)
			})
		})
		// Broker 0 fails a job, then enqueues with the key broker 1 holds.
		wg.Go(func() {
			first := true
			errs[0] = brokers[0].Write(context.Background(), "fail_then_enqueue", func(tx store.Tx) error {
				if first {
					first = false
					<-inserted
				}
				if err := failJob(tx, jobs[0], now); err != nil {
					return err
				}
				_, err := tx.JobInsertMany([]*store.JobInsertParams{key})
				return err
			})
		})
		waitFor(t, "broker 0 to wait for the key", func() bool { return d.waiting() > 0 })
		close(goOn)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, broker %d: %v", round, i, err)
			}
		}
	}
	noStoreDeadlocks(t, brokers...)
	if n := d.deadlocks(brokers...); n != 0 {
		t.Errorf("the server broke %d deadlocks between an enqueue and the finished totals, want none", n)
	}
}
