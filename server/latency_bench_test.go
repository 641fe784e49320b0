package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// BenchmarkEnqueueToAssignment measures, with one producer and one worker stream in this process
// and nothing else running, the time from calling Enqueue to the worker receiving the job. It
// reports the p50 and p99 of those times; docs/performance.md compares them with the
// multi-process benchmark.
func BenchmarkEnqueueToAssignment(b *testing.B) {
	br := brokertest.New(b, brokertest.Options{})
	w := br.Connect(brokertest.Hello("w1", 10, "t"))
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := br.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}}); err != nil {
			b.Fatal(err)
		}
		a := w.Assignment()
		lat = append(lat, time.Since(t0))
		w.Started(a)
		if r := w.Succeed(a); r.GetResultAck() == nil {
			b.Fatalf("no ack: %v", r)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
