package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// waitBenchJobs is how many jobs each round of BenchmarkWaitOn10kJobs runs.
const waitBenchJobs = 10_000

// BenchmarkWaitOn10kJobs drains 10,000 jobs through a Go worker with nobody waiting, and the
// same with a producer waiting on all of them (client.WaitAll over one WatchJobs call): the
// waiter costs the broker a read of each job as it finishes, never a read per job per
// interval. Measured on two cores shared by broker, worker and waiter: about 10% apart.
//
//	go test ./server -run '^$' -bench WaitOn10kJobs -benchtime 3x
func BenchmarkWaitOn10kJobs(b *testing.B) {
	for _, waiting := range []bool{false, true} {
		b.Run(fmt.Sprintf("waiting=%t", waiting), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += drainOnce(b, waiting)
			}
			b.ReportMetric(float64(waitBenchJobs*b.N)/total.Seconds(), "jobs/s")
		})
	}
}

// drainOnce enqueues the jobs into a paused queue, starts a worker (and the waiter), resumes
// the queue and returns how long the jobs took to succeed.
func drainOnce(b *testing.B, waiting bool) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	bb := brokertest.New(b, brokertest.Options{Commit: brokertest.GroupCommit(), Quiet: true})
	if _, err := bb.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "bench"}); err != nil {
		b.Fatal(err)
	}
	var ids []int64
	for len(ids) < waitBenchJobs {
		specs := make([]*jobwirev1.JobSpec, 1000)
		for i := range specs {
			specs[i] = &jobwirev1.JobSpec{Type: "t", Queue: "bench"}
		}
		res, err := bb.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: specs})
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range res.GetJobs() {
			ids = append(ids, j.GetId())
		}
	}
	w, err := worker.New(bb.Conn, worker.Options{ID: "bench", Concurrency: 64})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("t", func(context.Context, *worker.Job) error { return nil })
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(wctx) }()
	waited := make(chan error, 1)
	if waiting {
		go func() {
			_, err := client.New(bb.Conn).WaitAll(ctx, ids...)
			waited <- err
		}()
		brokertest.WaitFor(b, "the waiter", func() bool { return bb.Broker.Watched() == waitBenchJobs })
	}
	start := time.Now()
	if _, err := bb.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "bench"}); err != nil {
		b.Fatal(err)
	}
	for succeeded(b, bb) < waitBenchJobs {
		time.Sleep(5 * time.Millisecond)
	}
	if waiting {
		if err := <-waited; err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

func succeeded(b *testing.B, bb *brokertest.Bundle) int64 {
	counts, err := bb.Store.JobCounts(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		if c.State == job.StateSucceeded {
			n += c.Count
		}
	}
	return n
}
