package sqlite

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// benchReady is how many jobs wait to be leased in every BenchmarkJobLease database.
const benchReady = 1000

// BenchmarkJobLease shows that leasing a job costs the same whether the store keeps a thousand
// or a million finished jobs: dispatch reads the partial index of ready jobs only, so history
// does not slow it down. Each iteration is one write transaction that leases the next ready
// job and hands it back, so the ready set stays the same size throughout.
//
// The filled databases are cached in the temporary directory, keyed by the schema, because
// filling a million jobs takes seconds and -count would otherwise repeat it.
func BenchmarkJobLease(b *testing.B) {
	for _, finished := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("finished=%d", finished), func(b *testing.B) {
			if testing.Short() && finished > 1000 {
				b.Skip("the million-job database is skipped with -short")
			}
			ctx := context.Background()
			st := openBenchStore(ctx, b, finished)
			now := time.Unix(1_800_000_000, 0)
			params := store.JobLeaseParams{Types: []string{"bench"}, Limit: 1, WorkerID: "bench",
				Now: now, LeaseUntil: now.Add(time.Minute)}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				err := st.Write(ctx, "lease", func(tx store.Tx) error {
					jobs, err := tx.JobLease(&params)
					if err != nil {
						return err
					}
					if len(jobs) != 1 {
						return fmt.Errorf("leased %d jobs, want 1", len(jobs))
					}
					ok, err := tx.JobRelease(job.LeaseRef{JobID: jobs[0].ID, Token: jobs[0].LeaseToken})
					if err == nil && !ok {
						err = fmt.Errorf("job %d: release refused", jobs[0].ID)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStats reads what GetStats reads (job counts by queue, type and state, and every
// queue's depth) beside 1,000 or 1,000,000 finished jobs: the cost follows the unfinished
// jobs, not the history (migration 004).
func BenchmarkStats(b *testing.B) {
	for _, finished := range []int{1000, 1_000_000} {
		b.Run(fmt.Sprintf("finished=%d", finished), func(b *testing.B) {
			if testing.Short() && finished > 1000 {
				b.Skip("the million-job database is skipped with -short")
			}
			ctx := context.Background()
			st := openBenchStore(ctx, b, finished)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				counts, err := st.JobCounts(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.QueueStats(ctx, ""); err != nil {
					b.Fatal(err)
				}
				if len(counts) != 2 || counts[1].Count != int64(finished) {
					b.Fatalf("counts = %+v, want %d ready and %d succeeded", counts, benchReady, finished)
				}
			}
		})
	}
}

// openBenchStore opens a private copy of a database holding finished SUCCEEDED jobs and
// benchReady PENDING ones, filling the cached original first if there is none.
func openBenchStore(ctx context.Context, b *testing.B, finished int) *Store {
	b.Helper()
	key, err := schemaKey()
	if err != nil {
		b.Fatal(err)
	}
	cached := filepath.Join(os.TempDir(), fmt.Sprintf("jobwire-bench-lease-%s-%d.db", key, finished))
	if _, err := os.Stat(cached); err != nil {
		start := time.Now()
		if err := fillBenchDB(ctx, cached, finished); err != nil {
			b.Fatal(err)
		}
		b.Logf("filled %d finished jobs in %s (cached in %s)", finished, time.Since(start).Round(time.Millisecond), cached)
	}
	path := filepath.Join(b.TempDir(), "jobs.db")
	if err := copyFile(cached, path); err != nil {
		b.Fatal(err)
	}
	st, err := Open(ctx, path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// benchFill names how fillBenchDB fills a database; change it when that changes.
const benchFill = "fill 2: finished totals"

// schemaKey names the schema the migrations build: the newest version and a hash of every
// migration, so a cached database is never reused after the schema changed.
func schemaKey() (string, error) {
	ms, err := migrations()
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	version := 0
	for _, m := range ms {
		version = m.Version
		_, _ = io.WriteString(h, m.SQL)
	}
	_, _ = io.WriteString(h, benchFill)
	return fmt.Sprintf("v%d-%x", version, h.Sum64()), nil
}

// fillBenchDB builds the database at path: finished jobs, then the ready ones. It inserts with
// one INSERT ... SELECT over a recursive counter per kind, in a single transaction, so the
// million rows never cross the driver one by one. The file appears at path only when complete.
func fillBenchDB(ctx context.Context, path string, finished int) error {
	tmp := fmt.Sprintf("%s.%d.partial", path, os.Getpid())
	defer func() {
		for _, f := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			_ = os.Remove(f)
		}
	}()
	st, err := Open(ctx, tmp, Options{})
	if err != nil {
		return err
	}
	created := time.Unix(1_700_000_000, 0).UnixNano()
	const insert = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO jobs (type, queue, payload, state, attempts, max_attempts, run_at, created_at,
			finished_at, attempt_timeout_ns, worker_id)
		SELECT 'bench', 'default', x'7b7d', ?, ?, 25, ? + i, ? + i, ?, 60000000000, ? FROM n`
	err = st.Write(ctx, "fill", func(stx store.Tx) error {
		t := stx.(*tx)
		if _, err := t.exec(insert, finished, int(job.StateSucceeded), 1, created, created,
			created+int64(time.Hour), "bench"); err != nil {
			return err
		}
		if _, err := t.exec(insert, benchReady, int(job.StatePending), 0, created+int64(time.Hour),
			created+int64(time.Hour), nil, ""); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO queues (name) VALUES ('default') ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		// The broker never inserts a finished job; these rows are, so they are counted the way
		// migration 004 counts the ones a database already holds.
		_, err := t.exec(`INSERT INTO finished_totals (queue, type, state, n)
			SELECT queue, type, state, COUNT(*) FROM jobs WHERE state BETWEEN 5 AND 7 GROUP BY queue, type, state`)
		return err
	})
	if err == nil {
		// Move everything into the main file, which is the only one that is kept.
		_, err = st.wc.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// copyFile copies a closed, checkpointed SQLite file and syncs the copy.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	// Flushed now, outside the timed loop: otherwise the first checkpoint's sync writes the
	// whole copy while the benchmark runs, which charges the large database for its setup.
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}

// BenchmarkJobLeaseTypes is what a worker's types cost its leases where no backlog waits: a
// lease of one job of the first of n types, beside 1,000 ready jobs of it, and handed back.
// Up to store.MaxReads types a lease reads each (store.PlanReads); past that it first keeps
// those with ready jobs, a probe each (store.NarrowsTypes), and reads those: here one.
func BenchmarkJobLeaseTypes(b *testing.B) {
	for _, n := range []int{1, 8, 16, store.MaxReads, store.MaxReads + 1, 256, 1000} {
		b.Run(fmt.Sprintf("types=%d", n), func(b *testing.B) {
			types := benchTypes(n)
			benchLeaseOne(b, types, benchJobs(benchReady, types[:1], 0))
		})
	}
}

// BenchmarkJobLeaseReadyTypes is a lease of one job by a worker of n types that all have ready
// jobs (benchReady of them in all), handed back. With more than store.MaxReads of them ready it
// reads jobs_open once, and with backlog=10000 that many jobs of a type it does not take wait
// ahead of its own, as a type whose breaker is open would: the read passes over them.
func BenchmarkJobLeaseReadyTypes(b *testing.B) {
	for _, c := range []struct{ types, backlog int }{{40, 0}, {64, 0}, {100, 0}, {40, 10000}, {64, 10000}} {
		b.Run(fmt.Sprintf("types=%d/backlog=%d", c.types, c.backlog), func(b *testing.B) {
			types := benchTypes(c.types)
			fill := append(benchJobs(c.backlog, []string{"unserved"}, 1), benchJobs(benchReady, types, 0)...)
			benchLeaseOne(b, types, fill)
		})
	}
}

// benchTypes returns n job types, t0 to tN-1.
func benchTypes(n int) []string {
	types := make([]string, n)
	for i := range types {
		types[i] = fmt.Sprintf("t%d", i)
	}
	return types
}

// benchJobs returns n ready jobs of the given priority, their types taken in turn from types.
func benchJobs(n int, types []string, priority int) []*store.JobInsertParams {
	now := benchNow
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = &store.JobInsertParams{Type: types[i%len(types)], Queue: "default", Priority: priority, MaxAttempts: 1,
			RunAt: now, Now: now, AttemptTimeout: time.Minute}
	}
	return ps
}

// benchNow is the time the lease benchmarks' jobs are stored and leased at.
var benchNow = time.Unix(1_800_000_000, 0)

// benchLeaseOne stores fill in a fresh database, then times a transaction that leases one job
// of types and hands it back.
func benchLeaseOne(b *testing.B, types []string, fill []*store.JobInsertParams) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "jobwire.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.Write(ctx, "fill", func(tx store.Tx) error { _, err := tx.JobInsertMany(fill); return err }); err != nil {
		b.Fatal(err)
	}
	params := store.JobLeaseParams{Types: types, Limit: 1, WorkerID: "bench", Now: benchNow, LeaseUntil: benchNow.Add(time.Minute)}
	b.ReportAllocs()
	for b.Loop() {
		err := st.Write(ctx, "lease", func(tx store.Tx) error {
			jobs, err := tx.JobLease(&params)
			if err != nil || len(jobs) != 1 {
				return fmt.Errorf("leased %d jobs, want 1: %v", len(jobs), err)
			}
			_, err = tx.JobRelease(job.LeaseRef{JobID: jobs[0].ID, Token: jobs[0].LeaseToken})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
