package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// capsBundle is two stores on one schema, as two brokers on one database see it.
type capsBundle struct {
	ctx    context.Context
	a, b   *Store
	now    time.Time
	capped []int64 // jobs of queue "capped"
	paused []int64 // jobs of queue "paused"
}

// setupCaps opens two stores on a fresh schema with n jobs in queue "capped" (limit 3) and
// n in queue "paused" (paused), which come first in dispatch order.
func setupCaps(t *testing.T, n int) *capsBundle {
	t.Helper()
	u := pgtest.URL(t)
	cb := &capsBundle{ctx: context.Background(), now: time.Unix(1_700_000_000, 0)}
	for _, s := range []**Store{&cb.a, &cb.b} {
		st, err := Open(cb.ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		*s = st
	}
	var ps []*store.JobInsertParams
	for i := range 2 * n {
		q, prio := "capped", 0
		if i >= n {
			q, prio = "paused", 1
		}
		ps = append(ps, &store.JobInsertParams{Type: "t", Queue: q, Priority: prio, Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: cb.now, Now: cb.now, AttemptTimeout: time.Minute})
	}
	err := cb.a.Write(cb.ctx, "setup", func(tx store.Tx) error {
		res, err := tx.JobInsertMany(ps)
		if err != nil {
			return err
		}
		cb.capped, cb.paused = nil, nil
		for i, r := range res {
			if i < n {
				cb.capped = append(cb.capped, r.ID)
			} else {
				cb.paused = append(cb.paused, r.ID)
			}
		}
		if err := tx.QueueSetLimit("capped", 3); err != nil {
			return err
		}
		return tx.QueueSetPaused("paused", true)
	})
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

// lease leases up to limit jobs under the database's queue rules, in tx.
func (cb *capsBundle) lease(tx store.Tx, limit int) ([]*job.Job, error) {
	return tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: limit, EnforceQueues: true,
		WorkerID: "w", Now: cb.now, LeaseUntil: cb.now.Add(time.Hour)})
}

// held counts queue's LEASED and RUNNING jobs as committed.
func (cb *capsBundle) held(t *testing.T, queue string) int {
	t.Helper()
	var n int
	if err := cb.a.pool.QueryRow(cb.ctx, `SELECT count(*) FROM jobs WHERE queue = $1 AND state IN (3, 4)`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A lease that finds a capped queue locked by another store's lease waits for it to commit and
// then counts what it leased: two brokers leasing at once cannot both fill the same room.
func TestEnforcedCapWaitsForConcurrentLease(t *testing.T) {
	t.Parallel()
	cb := setupCaps(t, 6)
	type held struct{ jobs, pid int }
	holding, release := make(chan held, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo() // a failed test must not leave the first transaction open
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- cb.a.Write(cb.ctx, "first", func(stx store.Tx) error {
			jobs, err := cb.lease(stx, 4)
			var pid int
			if err == nil {
				err = stx.(*tx).tx.QueryRow(cb.ctx, `SELECT pg_backend_pid()`).Scan(&pid)
			}
			holding <- held{len(jobs), pid}
			<-release // keep the transaction open until the second lease waits
			return err
		})
	}()
	first := <-holding
	if first.jobs != 3 {
		t.Fatalf("first lease took %d jobs, want 3 (the cap)", first.jobs)
	}
	var second []*job.Job
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- cb.b.Write(cb.ctx, "second", func(tx store.Tx) error {
			var err error
			second, err = cb.lease(tx, 4)
			return err
		})
	}()
	// Wait until the second store's lease waits for the first's transaction, then let that
	// commit.
	waitFor(t, "the second lease to wait for the first", func() bool {
		select {
		case err := <-secondDone:
			t.Fatalf("the second lease finished (%v) while the first held the capped queue", err)
		default:
		}
		var waiting bool
		err := cb.a.pool.QueryRow(cb.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
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
	if len(second) != 0 || cb.held(t, "capped") != 3 {
		t.Fatalf("second lease took %v; %d held in the capped queue, want none and 3", ids(second), cb.held(t, "capped"))
	}
}

// Many leases from two stores at once, each finishing what it leased in a later write, never
// hold more than the cap between them, never lease from a paused queue, and drain the queue.
func TestEnforcedCapHoldsAcrossStores(t *testing.T) {
	t.Parallel()
	const jobs = 60
	cb := setupCaps(t, jobs)
	var (
		mu       sync.Mutex
		done     int
		problems []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range 6 {
		s := []*Store{cb.a, cb.b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 * jobs { // bounded: a lost update cannot spin forever
				mu.Lock()
				finished := done == jobs
				mu.Unlock()
				if finished {
					return
				}
				var leased []*job.Job
				err := s.Write(cb.ctx, "lease", func(stx store.Tx) error {
					var err error
					if leased, err = cb.lease(stx, 2); err != nil {
						return err
					}
					// Under the queue's lock nobody else can lease from it: the count this
					// transaction sees is the whole truth.
					var n int
					if err := stx.(*tx).tx.QueryRow(cb.ctx, `SELECT count(*) FROM jobs WHERE queue = 'capped' AND state IN (3, 4)`).Scan(&n); err != nil {
						return err
					}
					if n > 3 {
						report("%d held in the capped queue inside a lease", n)
					}
					return nil
				})
				if err != nil {
					report("lease: %v", err)
					return
				}
				if n := cb.held(t, "capped"); n > 3 {
					report("%d held in the capped queue after a lease", n)
				}
				for _, j := range leased {
					if j.Queue != "capped" {
						report("leased job %d of queue %s", j.ID, j.Queue)
					}
				}
				if len(leased) == 0 {
					continue
				}
				err = s.Write(cb.ctx, "finish", func(tx store.Tx) error {
					for _, j := range leased {
						ok, err := tx.JobFinish(&store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
							Queue: j.Queue, Type: j.Type, State: job.StateSucceeded, Now: cb.now,
							Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: cb.now, FinishedAt: cb.now, Outcome: job.OutcomeSucceeded}})
						if err == nil && !ok {
							err = errors.New("finish refused")
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					report("finish: %v", err)
					return
				}
				mu.Lock()
				done += len(leased)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if done != jobs {
		t.Errorf("finished %d of %d jobs", done, jobs)
	}
	for _, id := range cb.paused {
		j, err := cb.a.JobGet(cb.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != job.StatePending {
			t.Errorf("paused queue's job %d is %s, want PENDING", id, j.State)
		}
	}
}

func ids(jobs []*job.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// BenchmarkLeaseCapped is what enforcing a cap in the database adds to a lease: each iteration
// is one write that leases one job of a capped queue (limit: its held jobs + 10) and hands it
// back. held jobs of the capped queue, and other held jobs of an uncapped queue, are leased
// before. "caps" is the room a single broker passes in (JobLeaseParams.Caps); "enforced" locks
// the capped queues' rows and counts their held jobs (JobLeaseParams.EnforceQueues);
// "enforced-uncapped" is an enforced lease when no queue is capped, which finds nothing to
// lock or count.
func BenchmarkLeaseCapped(b *testing.B) {
	for _, c := range []struct{ held, other int }{{10, 0}, {1000, 0}, {10, 1000}} {
		for _, mode := range []string{"caps", "enforced", "enforced-uncapped"} {
			b.Run(fmt.Sprintf("held=%d/other=%d/%s", c.held, c.other, mode), func(b *testing.B) {
				ctx := context.Background()
				s, err := Open(ctx, pgtest.URL(b), Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				now := time.Unix(1_700_000_000, 0)
				in := func(queue string, n int) []*store.JobInsertParams {
					var ps []*store.JobInsertParams
					for range n {
						ps = append(ps, &store.JobInsertParams{Type: "t", Queue: queue, Payload: []byte(`{}`),
							MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute})
					}
					return ps
				}
				lease := func(tx store.Tx, queue string, n int) error {
					if n == 0 {
						return nil
					}
					_, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Queues: []string{queue}, Limit: n,
						WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Hour)})
					return err
				}
				err = s.Write(ctx, "setup", func(tx store.Tx) error {
					if _, err := tx.JobInsertMany(append(in("capped", c.held+100), in("other", c.other)...)); err != nil {
						return err
					}
					if mode != "enforced-uncapped" {
						if err := tx.QueueSetLimit("capped", c.held+10); err != nil {
							return err
						}
					}
					if err := lease(tx, "capped", c.held); err != nil {
						return err
					}
					return lease(tx, "other", c.other)
				})
				if err != nil {
					b.Fatal(err)
				}
				p := store.JobLeaseParams{Types: []string{"t"}, Queues: []string{"capped"}, Limit: 1, WorkerID: "w",
					Now: now, LeaseUntil: now.Add(time.Hour)}
				if mode == "caps" {
					p.Caps = map[string]int{}
				} else {
					p.EnforceQueues = true
				}
				b.ReportAllocs()
				for b.Loop() {
					if p.Caps != nil {
						p.Caps["capped"] = 10
					}
					err := s.Write(ctx, "lease", func(tx store.Tx) error {
						jobs, err := tx.JobLease(&p)
						if err != nil {
							return err
						}
						if len(jobs) != 1 {
							return fmt.Errorf("leased %d jobs, want 1", len(jobs))
						}
						_, err = tx.JobRelease(job.LeaseRef{JobID: jobs[0].ID, Token: jobs[0].LeaseToken})
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// PausedReady reads the paused queues' entries of the ready index, in its order, and stops at
// its bound: beside a backlog of other queues, a history and a paused queue's own backlog,
// every broker counts it every second while a queue is paused. (What it counts:
// TestStoreContract/PausedReady.)
func TestPausedReadyReadsThePausedQueuesEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t)
	if err := s.Write(ctx, "test", func(tx store.Tx) error { return tx.QueueSetPaused("held", true) }); err != nil {
		t.Fatal(err)
	}
	execAll(t, s,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			SELECT 't', 'open', '\x7b7d', 2, 3, n, 1, 60000000000 FROM generate_series(1, 20000) AS n`,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, finished_at, attempt_timeout_ns)
			SELECT 't', 'held', '\x7b7d', 5, 3, 1, 1, n, 60000000000 FROM generate_series(1, 20000) AS n`,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			SELECT 't', 'held', '\x7b7d', 2, 3, n, 1, 60000000000 FROM generate_series(1, 20000) AS n`,
		`ANALYZE jobs`,
	)
	if n, err := s.PausedReady(ctx, 100); err != nil || n != 100 {
		t.Errorf("beside a paused backlog, counted %d up to 100 (%v), want 100", n, err)
	}
	plan := explain(t, s.pool, `EXPLAIN `+pausedReadySQL, pgx.QueryExecModeExec, 100)
	if !strings.Contains(plan, "Scan using jobs_ready_queue_type") { // an index scan, or an index-only one
		t.Errorf("the count does not read the paused queues' entries of the ready index in its order:\n%s", plan)
	}
}
