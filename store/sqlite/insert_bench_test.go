//go:build unix

package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storetest"
)

// BenchmarkJobInsert is storetest.BenchJobInsert on SQLite, whose jobs_created index comes with
// migration 013:
//
//	for i in 1 2 3 4; do go test -run '^$' -bench 'JobInsert|JobListNewest' ./store/sqlite; done
//
// Measured (4 rounds, a machine shared with other work: wall times swamped, CPU per op
// steadier): 100 jobs per insert took 1.04 ms of CPU with the index and 0.85 ms without (+20%,
// about 2 µs per job); one job per insert 0.11 ms either way, within the noise. The index stays:
// without it the job list's first page sorts the whole table, 113-137 ms of CPU instead of
// 0.6 ms beside 100,000 jobs, every two seconds while a dashboard is open on it.
func BenchmarkJobInsert(b *testing.B) { storetest.BenchJobInsert(b, insertBenchStore) }

// BenchmarkJobListNewest is storetest.BenchJobListNewest on SQLite.
func BenchmarkJobListNewest(b *testing.B) { storetest.BenchJobListNewest(b, insertBenchStore) }

// insertBenchStore opens a store on a fresh file holding 100,000 finished jobs, without the
// jobs_created index unless index; report adds the process's CPU time per op (the store runs in
// it).
func insertBenchStore(b *testing.B, index bool) (store.Store, func()) {
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
	cpu := processCPU(b)
	return st, func() {
		b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// processCPU is the CPU time, user and system, the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
