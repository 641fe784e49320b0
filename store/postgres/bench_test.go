package postgres

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// benchBatch is how many jobs each BenchmarkWriterCycle transaction inserts, leases and
// finishes: about what one group commit carries under load.
const benchBatch = 100

// BenchmarkWriterCycle is the broker writer's steady state under load, one transaction per
// iteration: lock the jobs it finishes (tx.JobLockRows), insert benchBatch jobs, store the
// successes of the jobs the previous iteration leased, and lease benchBatch ready jobs, the
// successes and the lease sent with COMMIT as the writer sends them in a cluster (breakers and
// queue pauses and caps enforced by the lease's statement). The table starts with 100,000
// finished jobs, so a statement that reads history instead of the partial indexes
// shows. ns/op is one such transaction: benchBatch jobs inserted, leased and finished;
// round-trips/op counts the statements and batches it sent.
func BenchmarkWriterCycle(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	s, report := cycleStore(b, 100_000, now)
	batch := make([]*store.JobInsertParams, benchBatch)
	for i := range batch {
		batch[i] = &store.JobInsertParams{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`),
			MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}
	}
	lease := store.JobLeaseParams{Types: []string{"bench"}, Limit: benchBatch, WorkerID: "bench",
		Now: now, LeaseUntil: now.Add(time.Minute), EnforceQueues: true, SkipCapped: true, ExcludeShut: true}
	var held []*job.Job
	var refused error
	for b.Loop() {
		err := s.Write(context.Background(), "cycle", func(tx store.Tx) error {
			// The writer locks the jobs its batch writes first (commit's jobsWritten).
			if err := tx.JobLockRows(jobIDs(held)); err != nil {
				return err
			}
			if _, err := tx.JobInsertMany(batch); err != nil {
				return err
			}
			finish := make([]*store.JobFinishParams, len(held))
			for i, j := range held {
				finish[i] = &store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
					Queue: j.Queue, Type: j.Type, State: job.StateSucceeded, Now: now,
					Attempt: job.Attempt{Number: 1, WorkerID: "bench", StartedAt: now, FinishedAt: now,
						Outcome: job.OutcomeSucceeded}}
			}
			prev := held
			if err := tx.JobSucceedManyAtCommit(finish, func(applied []bool, err error) {
				for i, ok := range applied {
					if !ok {
						refused = fmt.Errorf("job %d: success refused", prev[i].ID)
					}
				}
			}); err != nil {
				return err
			}
			return tx.JobLeaseAtCommit([]*store.JobLeaseParams{&lease}, func(jobs [][]*job.Job, err error) { held = jobs[0] })
		})
		if err == nil {
			err = refused
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(held) != benchBatch {
			b.Fatalf("leased %d jobs, want %d", len(held), benchBatch)
		}
	}
	report()
}

// jobIDs are the ids of jobs.
func jobIDs(jobs []*job.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// BenchmarkSmallCycle is the writer's cycle at a low rate (1,000 jobs/s, one job at a time):
// one job inserted and leased by its insert (an offer), and the success of the job the
// iteration before leased.
func BenchmarkSmallCycle(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	s, report := cycleStore(b, 10_000, now)
	ins := []*store.JobInsertParams{{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`),
		MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}}
	offer := []*store.JobOffer{{WorkerID: "w", Owner: "b", LeaseUntil: now.Add(time.Minute)}}
	var held *job.Job
	for b.Loop() {
		prev := held
		err := s.Write(context.Background(), "cycle", func(tx store.Tx) error {
			if _, err := tx.JobInsertOfferedAtCommit(ins, offer, func(jobs []*job.Job, err error) {
				if err == nil {
					held = jobs[0]
				}
			}); err != nil {
				return err
			}
			if prev == nil {
				return nil
			}
			return tx.JobSucceedManyAtCommit([]*store.JobFinishParams{{Ref: job.LeaseRef{JobID: prev.ID, Token: prev.LeaseToken},
				Queue: prev.Queue, Type: prev.Type, State: job.StateSucceeded, Now: now,
				Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded}}},
				func([]bool, error) {})
		})
		if err != nil {
			b.Fatal(err)
		}
		if held == nil || held == prev {
			b.Fatal("the offered job was not leased")
		}
	}
	report()
}

// cycleStore opens a store on one connection, so that its server process is the one doing
// every iteration's work, with history finished jobs in it. report, called after the loop,
// adds round-trips/op (statements and batches sent) and server-µs/op: the CPU time of that
// server process, which unlike ns/op barely moves with what else the machine runs.
func cycleStore(b *testing.B, history int, now time.Time) (s *Store, report func()) {
	ctx := context.Background()
	trips := &tripCounter{}
	s, err := Open(ctx, pgtest.URL(b), Options{MaxConns: 1, Logger: slog.New(slog.DiscardHandler), tracer: trips})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	fillFinished(ctx, b, s, history, now)
	server := serverCPU(ctx, b, s)
	before := trips.n.Load()
	b.ReportAllocs()
	return s, func() {
		b.StopTimer()
		b.ReportMetric(float64(trips.n.Load()-before)/float64(b.N), "round-trips/op")
		if used, ok := server(); ok {
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "server-µs/op")
		}
	}
}

// serverCPU returns a function that reports how much CPU time the server process behind the
// store's one connection has used since; false when that process cannot be read (a server on
// another machine).
func serverCPU(ctx context.Context, tb testing.TB, s *Store) func() (time.Duration, bool) {
	tb.Helper()
	var pid int32
	if err := s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tb.Fatal(err)
	}
	read := func() (time.Duration, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// The fields after the command (which may hold spaces) close with ")": utime and
		// stime are the 12th and 13th of them, in clock ticks (100 a second on Linux).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		user, err1 := strconv.ParseInt(f[11], 10, 64)
		sys, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		return time.Duration(user+sys) * 10 * time.Millisecond, true
	}
	start, ok := read()
	return func() (time.Duration, bool) {
		now, ok2 := read()
		return now - start, ok && ok2
	}
}

// fillFinished inserts n SUCCEEDED jobs of type "old".
func fillFinished(ctx context.Context, tb testing.TB, s *Store, n int, now time.Time) {
	tb.Helper()
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at,
		created_at, finished_at, attempt_timeout_ns, attempts)
		SELECT 'old', 'default', '\x7b7d', 5, 3, $1, $1, $1, 60000000000, 1 FROM generate_series(1, $2)`,
		nanos(now.Add(-time.Hour)), n); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkDeleteFinished is one batch of the retention sweep: a transaction that deletes 500
// succeeded jobs of five queues (and their finished totals), out of 100,000. The jobs are put
// back between iterations, off the clock; server-µs/op counts them too, delete-server-µs/op
// the deletes alone (the server's CPU time read before and after each, in 10 ms ticks).
func BenchmarkDeleteFinished(b *testing.B) {
	const batch = 500
	now := time.Unix(1_800_000_000, 0)
	s, report := cycleStore(b, 100_000, now)
	ctx := context.Background()
	server := serverCPU(ctx, b, s)
	var deletes time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := s.pool.Exec(ctx, `WITH j AS (INSERT INTO jobs (type, queue, payload, state, max_attempts,
			run_at, created_at, finished_at, attempt_timeout_ns, attempts)
			SELECT 'new', 'q' || (i % 5), '\x7b7d', 5, 3, $1, $1, $1, 60000000000, 1 FROM generate_series(1, $2) AS i
			RETURNING queue, type, state)
			INSERT INTO finished_totals (queue, type, state, n) SELECT queue, type, state, count(*) FROM j
			GROUP BY queue, type, state ON CONFLICT (queue, type, state) DO UPDATE SET n = finished_totals.n + excluded.n`,
			nanos(now.Add(-2*time.Hour)), batch); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		before, _ := server()
		var n int
		err := s.Write(ctx, "delete_finished", func(tx store.Tx) error {
			var err error
			n, err = tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded},
				FinishedBefore: now.Add(-90 * time.Minute), Limit: batch})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		after, _ := server()
		deletes += after - before
		if n != batch {
			b.Fatalf("deleted %d jobs, want %d", n, batch)
		}
	}
	report()
	if _, ok := server(); ok {
		b.ReportMetric(float64(deletes.Microseconds())/float64(b.N), "delete-server-µs/op")
	}
}
