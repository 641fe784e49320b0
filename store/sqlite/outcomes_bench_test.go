//go:build unix

package sqlite

import (
	"context"
	"testing"
)

// BenchmarkJobOutcomes reads what a watch reads when jobs finish: 250 jobs at once (about 20 ms
// of finishing at 10,000 jobs a second), and their versions, among 100,000.
//
//	go test -run '^$' -bench 'JobOutcomes|JobVersions|FinalAmong' ./store/sqlite
func BenchmarkJobOutcomes(b *testing.B) {
	st, report := insertBenchStore(b, true)
	ids := benchIDs(250)
	b.ReportAllocs()
	for b.Loop() {
		jobs, err := st.JobOutcomes(context.Background(), ids)
		if err != nil || len(jobs) != len(ids) {
			b.Fatalf("read %d jobs: %v", len(jobs), err)
		}
	}
	report()
}

// BenchmarkJobVersions reads the versions of 10,000 jobs, a watch's first read, among 100,000.
func BenchmarkJobVersions(b *testing.B) {
	st, report := insertBenchStore(b, true)
	ids := benchIDs(10_000)
	b.ReportAllocs()
	for b.Loop() {
		vs, err := st.JobVersions(context.Background(), ids)
		if err != nil || len(vs) != len(ids) {
			b.Fatalf("read %d versions: %v", len(vs), err)
		}
	}
	report()
}

// BenchmarkFinalAmong counts 10,000 jobs among 100,000 and names the final ones (all are): a
// wait's first look, and its backstop, on the ids of one batch (a range) and on every seventh.
func BenchmarkFinalAmong(b *testing.B) {
	every7 := benchIDs(10_000)
	batch := make([]int64, 10_000)
	for i := range batch {
		batch[i] = int64(50_001 + i)
	}
	for _, c := range []struct {
		name string
		ids  []int64
	}{{"batch", batch}, {"every7", every7}} {
		b.Run(c.name, func(b *testing.B) {
			st, report := insertBenchStore(b, true)
			b.ReportAllocs()
			for b.Loop() {
				found, _, err := st.FinalAmong(context.Background(), c.ids)
				if err != nil || found != len(c.ids) {
					b.Fatalf("found %d jobs: %v", found, err)
				}
			}
			report()
		})
	}
}

// benchIDs are n ids of the jobs insertBenchStore stores, in order, every seventh.
func benchIDs(n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(1 + 7*i)
	}
	return ids
}
