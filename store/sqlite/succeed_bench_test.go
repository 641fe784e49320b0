package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// BenchmarkJobSucceedMany is the part of a group commit that stores a batch of successes
// (JobSucceedMany), as a drain or many producers make them: each iteration inserts and leases
// a batch's jobs with the timer stopped, then times the transaction that stores their
// successes. It reports the time per success.
//
//	go test -run '^$' -bench JobSucceedMany ./store/sqlite
func BenchmarkJobSucceedMany(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			ctx := context.Background()
			st := openEmptyBench(ctx, b)
			now := time.Unix(1_800_000_000, 0)
			insert := make([]*store.JobInsertParams, n)
			for i := range insert {
				insert[i] = &store.JobInsertParams{Type: "t", Queue: "default", MaxAttempts: 3, RunAt: now, Now: now,
					AttemptTimeout: time.Minute}
			}
			var ps []*store.JobFinishParams
			for b.Loop() {
				b.StopTimer()
				ps = ps[:0]
				err := st.Write(ctx, "lease", func(tx store.Tx) error {
					if _, err := tx.JobInsertMany(insert); err != nil {
						return err
					}
					leased, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: n, WorkerID: "w",
						Now: now, LeaseUntil: now.Add(time.Minute)})
					for _, j := range leased {
						ps = append(ps, &store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
							Queue: j.Queue, Type: j.Type, State: job.StateSucceeded, Now: now,
							Attempt: job.Attempt{Number: 1, StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded}})
					}
					return err
				})
				if err != nil || len(ps) != n {
					b.Fatalf("leased %d of %d: %v", len(ps), n, err)
				}
				b.StartTimer()
				writeAllApplied(ctx, b, st, func(tx store.Tx) ([]bool, error) { return tx.JobSucceedMany(ps) })
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/success")
		})
	}
}

// BenchmarkJobProgressMany is the part of a group commit that stores a batch of progress
// reports (JobProgressMany) on leased jobs, with its commit. It reports the time per report.
func BenchmarkJobProgressMany(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			ctx := context.Background()
			st := openEmptyBench(ctx, b)
			now := time.Unix(1_800_000_000, 0)
			var ps []*store.JobProgressParams
			err := st.Write(ctx, "lease", func(tx store.Tx) error {
				for range n {
					if _, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", MaxAttempts: 3,
						RunAt: now, Now: now, AttemptTimeout: time.Minute}}); err != nil {
						return err
					}
				}
				leased, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: n, WorkerID: "w",
					Now: now, LeaseUntil: now.Add(time.Hour)})
				for _, j := range leased {
					ps = append(ps, &store.JobProgressParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
						Progress: job.Progress{Attempt: 1, HasFraction: true, Message: "copying"}})
				}
				return err
			})
			if err != nil || len(ps) != n {
				b.Fatalf("leased %d of %d: %v", len(ps), n, err)
			}
			i := 0
			for b.Loop() {
				i++
				for _, p := range ps {
					p.Progress.Fraction = float64(i%100) / 100
					p.Progress.UpdatedAt = now.Add(time.Duration(i) * time.Millisecond)
				}
				writeAllApplied(ctx, b, st, func(tx store.Tx) ([]bool, error) {
					return tx.(store.ProgressTx).JobProgressMany(ps)
				})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/report")
		})
	}
}

// openEmptyBench opens a new store for a benchmark, closed when it ends.
func openEmptyBench(ctx context.Context, b *testing.B) *Store {
	b.Helper()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "jobs.db"), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// writeAllApplied runs write in a transaction and fails the benchmark unless every one of the
// writes it made applied.
func writeAllApplied(ctx context.Context, b *testing.B, st *Store, write func(store.Tx) ([]bool, error)) {
	b.Helper()
	err := st.Write(ctx, "bench", func(tx store.Tx) error {
		applied, err := write(tx)
		for i, ok := range applied {
			if !ok {
				return fmt.Errorf("write %d of %d not applied", i, len(applied))
			}
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}
