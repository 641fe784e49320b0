package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
)

// BenchOpener opens a store for a benchmark, holding 100,000 finished jobs, without the
// jobs_created index unless index. report, called once the benchmark's loop is done, adds what
// the store can measure of the loop's cost beside wall time (CPU time per op): on a machine
// shared with other work the wall time says more about the neighbours than about the index.
type BenchOpener func(b *testing.B, index bool) (s store.Store, report func())

// BenchJobInsert is an enqueue as the broker's writer stores it, one transaction that inserts a
// batch of jobs (1 or 100), into a store open gives, with and without the jobs_created index.
// The variants run interleaved under -count, so a machine that slows down meanwhile slows all.
func BenchJobInsert(b *testing.B, open BenchOpener) {
	for _, batch := range []int{1, 100} {
		for _, index := range []bool{true, false} {
			b.Run(fmt.Sprintf("batch=%d/created-index=%v", batch, index), func(b *testing.B) {
				ctx := context.Background()
				now := time.Unix(1_800_000_000, 0)
				s, report := open(b, index)
				ps := make([]*store.JobInsertParams, batch)
				b.ReportAllocs()
				for b.Loop() {
					now = now.Add(time.Millisecond)
					for i := range ps {
						ps[i] = &store.JobInsertParams{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`),
							MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}
					}
					if err := s.Write(ctx, "insert", func(tx store.Tx) error {
						_, err := tx.JobInsertMany(ps)
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				report()
			})
		}
	}
}

// BenchJobListNewest is what the jobs_created index buys: the first page of the job list in its
// default order (newest first), as the dashboard reads it every two seconds while live, beside
// the 100,000 finished jobs of a store open gives, with and without the index.
func BenchJobListNewest(b *testing.B, open BenchOpener) {
	for _, index := range []bool{true, false} {
		b.Run(fmt.Sprintf("created-index=%v", index), func(b *testing.B) {
			ctx := context.Background()
			s, report := open(b, index)
			for b.Loop() {
				jobs, err := s.JobList(ctx, &store.JobListParams{Limit: 101})
				if err != nil || len(jobs) != 101 {
					b.Fatalf("listed %d jobs: %v", len(jobs), err)
				}
			}
			report()
		})
	}
}
