package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// deadJob fails j's only attempt in a write of its own, finished at now.
func deadJob(t *testing.T, s *Store, j *job.Job, now time.Time) {
	t.Helper()
	if err := s.Write(context.Background(), "fail", func(tx store.Tx) error { return failJob(tx, j, now) }); err != nil {
		t.Fatal(err)
	}
}

// finishedTotal reads the finished total of queue q, type t, state dead.
func finishedTotal(t *testing.T, s *Store, q string) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), `SELECT COALESCE(sum(n), 0)::bigint FROM finished_totals
		WHERE queue = $1 AND type = 't' AND state = 6`, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockTotal opens a transaction on its own session that locks the finished total of queue q
// (type t, state dead), and returns a function that ends it.
func lockTotal(t *testing.T, url, q string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT FROM finished_totals WHERE queue = $1 AND type = 't' AND state = 6 FOR UPDATE`, q)
	}
	if err != nil {
		_ = conn.Close(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

// The deletes of finished jobs (the retention sweep, the purge of the dead-letter queue, and
// the retention sweep of a broker of the previous version, whose statement the trigger
// finished_totals_delete serves) take the rows of the finished totals in the order every
// broker's writer takes them: by queue and type compared byte by byte, so Z before b. The
// database sorts by its collation, here ICU's English, in which b comes before c before Z: the
// trigger's update took the rows in that order. Each case is arranged to deadlock when a delete
// takes them so. A session of the test holds c's row; the delete, which takes b's before c's
// (or, in order, Z's and b's), waits for it; then another broker fails jobs of queues Z and b,
// which takes Z's row (or waits for it) and waits for b's; then c's row is let go. The delete,
// had it taken b's first, would want Z's, held by the broker that waits for its b's.
func TestDeletesTakeTheTotalsInOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		delete func(s *Store, dead []*job.Job, before time.Time) error
	}{
		{"retention", func(s *Store, _ []*job.Job, before time.Time) error {
			return s.Write(context.Background(), "delete_finished", func(tx store.Tx) error {
				_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateDead},
					FinishedBefore: before, Limit: 100})
				return err
			})
		}},
		{"purge", func(s *Store, dead []*job.Job, _ time.Time) error {
			return s.Write(context.Background(), "dlq_purge", func(tx store.Tx) error {
				ids := make([]int64, len(dead))
				for i, j := range dead {
					ids[i] = j.ID
				}
				_, err := tx.JobDeleteDead(ids)
				return err
			})
		}},
		{"previous version", func(s *Store, _ []*job.Job, before time.Time) error {
			// The retention sweep's statement as brokers of the previous version run it: the
			// trigger alone takes the jobs off the totals.
			return pgx.BeginFunc(context.Background(), s.pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(context.Background(), `DELETE FROM jobs WHERE id IN (SELECT id FROM jobs
					WHERE state = ANY($1) AND finished_at < $2 ORDER BY finished_at LIMIT $3)`,
					[]int16{int16(job.StateDead)}, nanos(before), 100)
				return err
			})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := newDeadlockDBWith(t, `LOCALE_PROVIDER icu ICU_LOCALE 'en' TEMPLATE template0`)
			brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
			now := time.Unix(1_700_000_000, 0)
			dead := deadlockJobs(t, brokers[0], now, "b", "c", "Z")
			for _, j := range dead {
				deadJob(t, brokers[0], j, now)
			}
			failing := deadlockJobs(t, brokers[0], now, "Z", "b")

			release := lockTotal(t, d.url, "c")
			errs := make([]error, 2)
			var wg sync.WaitGroup
			wg.Go(func() { errs[0] = c.delete(brokers[0], dead, now.Add(time.Second)) })
			waitFor(t, "the delete to wait for c's total", func() bool { return d.waiting() == 1 })
			wg.Go(func() {
				errs[1] = brokers[1].Write(context.Background(), "fail", func(tx store.Tx) error {
					for _, j := range failing {
						if err := failJob(tx, j, now.Add(time.Minute)); err != nil {
							return err
						}
					}
					return nil
				})
			})
			waitFor(t, "the failures to wait for a total", func() bool { return d.waiting() == 2 })
			release()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("broker %d: %v", i, err)
				}
			}
			for q, want := range map[string]int64{"Z": 1, "b": 1, "c": 0} {
				if n := finishedTotal(t, brokers[0], q); n != want {
					t.Errorf("the totals count %d dead jobs of queue %s, want %d", n, q, want)
				}
			}
			noStoreDeadlocks(t, brokers...)
			if n := d.deadlocks(brokers...); n != 0 {
				t.Errorf("the server broke %d deadlocks between a delete and a writer, want none", n)
			}
		})
	}
}

// A write that fails a job of queue a and then purges a dead job of queue c takes the totals'
// rows in order: c's after a's, with the failure's at the end, not c's with the delete.
// Otherwise, another broker that fails jobs of queues a and c, taking a's row and waiting for
// c's while the first transaction goes on, is waited for in turn when that one writes a's.
func TestDeleteInAWriteWithTotalsHeldTakesThemInOrder(t *testing.T) {
	t.Parallel()
	d := newDeadlockDB(t)
	brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
	now := time.Unix(1_700_000_000, 0)
	dead := deadlockJobs(t, brokers[0], now, "a", "c")
	for _, j := range dead {
		deadJob(t, brokers[0], j, now)
	}
	failing := deadlockJobs(t, brokers[0], now, "a", "a", "c")

	deleted, goOn := make(chan struct{}), make(chan struct{})
	var failed atomic.Bool
	errs := make([]error, 2)
	var wg sync.WaitGroup
	var signal sync.Once // deleted is closed once the delete is done, or the write failed before
	wg.Go(func() {
		defer signal.Do(func() { close(deleted) })
		first := true
		errs[0] = brokers[0].Write(context.Background(), "fail_then_purge", func(tx store.Tx) error {
			if err := failJob(tx, failing[0], now); err != nil {
				return err
			}
			if _, err := tx.JobDeleteDead([]int64{dead[1].ID}); err != nil {
				return err
			}
			if first {
				first = false
				signal.Do(func() { close(deleted) })
				<-goOn
			}
			return nil
		})
	})
	<-deleted
	wg.Go(func() {
		defer failed.Store(true)
		errs[1] = brokers[1].Write(context.Background(), "fail", func(tx store.Tx) error {
			for _, j := range failing[1:] {
				if err := failJob(tx, j, now); err != nil {
					return err
				}
			}
			return nil
		})
	})
	// Waiting for the first transaction (for c's row, which its delete took) or done.
	waitFor(t, "the other broker's failures to wait or end", func() bool { return failed.Load() || d.waiting() > 0 })
	close(goOn)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("broker %d: %v", i, err)
		}
	}
	for q, want := range map[string]int64{"a": 3, "c": 1} {
		if n := finishedTotal(t, brokers[0], q); n != want {
			t.Errorf("the totals count %d dead jobs of queue %s, want %d", n, q, want)
		}
	}
	noStoreDeadlocks(t, brokers...)
	if n := d.deadlocks(brokers...); n != 0 {
		t.Errorf("the server broke %d deadlocks between a purge and a writer, want none", n)
	}
}
