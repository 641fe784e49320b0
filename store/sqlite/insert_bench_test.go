//go:build unix

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
)

// BenchmarkJobInsert is an enqueue as the broker's writer stores it, one transaction that
// inserts a batch of jobs, into a table that already holds 100,000 finished jobs, with and
// without the jobs_created index that the job list reads (migration 013). The two run
// interleaved under -count, so a machine that slows down meanwhile slows both:
//
//	for i in 1 2 3 4; do go test -run '^$' -bench 'JobInsert|JobListNewest' ./store/sqlite; done
//
// Measured (4 rounds, a machine shared with other work: wall times swamped, CPU per op
// steadier): 100 jobs per insert took 1.04 ms of CPU with the index and 0.85 ms without (+20%,
// about 2 µs per job); one job per insert 0.11 ms either way, within the noise. The index stays:
// without it the job list's first page sorts the whole table, 113-137 ms of CPU instead of
// 0.6 ms beside 100,000 jobs, every two seconds while a dashboard is open on it.
func BenchmarkJobInsert(b *testing.B) {
	for _, batch := range []int{1, 100} {
		for _, index := range []bool{true, false} {
			b.Run(fmt.Sprintf("batch=%d/created-index=%v", batch, index), func(b *testing.B) {
				benchJobInsert(b, batch, index)
			})
		}
	}
}

// BenchmarkJobListNewest is what the index buys: the first page of the job list in its default
// order (newest first), as the dashboard reads it every two seconds while live, beside the same
// 100,000 finished jobs.
func BenchmarkJobListNewest(b *testing.B) {
	for _, index := range []bool{true, false} {
		b.Run(fmt.Sprintf("created-index=%v", index), func(b *testing.B) {
			st := insertBenchStore(b, index)
			ctx := context.Background()
			cpu := processCPU(b)
			for b.Loop() {
				jobs, err := st.JobList(ctx, &store.JobListParams{Limit: 101})
				if err != nil || len(jobs) != 101 {
					b.Fatalf("listed %d jobs: %v", len(jobs), err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func benchJobInsert(b *testing.B, batch int, index bool) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	st := insertBenchStore(b, index)
	ps := make([]*store.JobInsertParams, batch)
	b.ReportAllocs()
	// The process's CPU time per insert, beside the wall time: on a machine shared with other
	// work the wall time says more about the neighbours than about the index.
	cpu := processCPU(b)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		for i := range ps {
			ps[i] = &store.JobInsertParams{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`),
				MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}
		}
		if err := st.Write(ctx, "insert", func(tx store.Tx) error {
			_, err := tx.JobInsertMany(ps)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// insertBenchStore opens a store on a fresh file holding 100,000 finished jobs, without the
// jobs_created index unless index.
func insertBenchStore(b *testing.B, index bool) *Store {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "jobs.db")
	st, err := Open(ctx, path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	// The history and the index's removal go in through a plain connection; the store then
	// opens the migrated file as it is.
	db, err := sql.Open("sqlite", dataSource(path, SyncNormal, defaultBusyTimeout))
	if err != nil {
		b.Fatal(err)
	}
	stmts := []string{`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
		INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, finished_at, attempt_timeout_ns, attempts)
		SELECT 'old', 'default', '{}', 5, 3, ?1, ?1 + i, ?1 + i, 60000000000, 1 FROM n`}
	if !index {
		stmts = append(stmts, `DROP INDEX jobs_created`)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q, now.Add(-time.Hour).UnixNano()); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	if st, err = Open(ctx, path, Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// processCPU is the CPU time, user and system, the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
