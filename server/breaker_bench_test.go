package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// BenchmarkBadPayloads drains one job type through the Go worker SDK with a few bad payloads
// among its jobs, under the count-mode breaker (the default before ratio mode) and under the
// default ratio-mode one, in the same run:
//
//   - 500 jobs on 1 slot, the bad ones spread over all 500;
//   - 500 jobs of 2 ms each on 16 slots, the bad ones among the first 50.
//
// Each drains clean, with 2% bad payloads (10 jobs failing FATAL at once), and with every job
// failing transiently. The broker runs on the fake clock, so a breaker that opens holds its jobs
// until the benchmark moves the clock by OpenFor: held-s is that time (what a user waits on top
// of wall-ms), opens how often it opened. For the transient runs calls-to-open is how many
// attempts ended before the breaker first opened, and the run stops there.
//
//	go test -run '^$' -bench BadPayloads -benchtime 1x ./server
func BenchmarkBadPayloads(b *testing.B) {
	scenarios := []struct {
		name     string
		slots    int
		work     time.Duration
		badAmong int
	}{
		{"500jobs-1slot", 1, 0, 500},
		{"500jobs-2ms-16slots", 16, 2 * time.Millisecond, 50},
	}
	const jobs, bad = 500, 10
	for _, sc := range scenarios {
		for _, payload := range []string{"clean", "fatal-2pct", "transient-100pct"} {
			for _, mode := range []string{"count", "ratio"} {
				b.Run(fmt.Sprintf("%s/%s/%s", sc.name, payload, mode), func(b *testing.B) {
					cfg := breaker.DefaultConfig()
					if mode == "count" {
						cfg = breaker.CountConfig()
					}
					var held time.Duration
					var opens, calls int
					var wall time.Duration
					for range b.N {
						r := drainBadPayloads(b, cfg, jobs, sc.slots, sc.work, func(i int) string {
							switch {
							case payload == "transient-100pct":
								return "down"
							case payload == "fatal-2pct" && i < sc.badAmong && i%(sc.badAmong/bad) == sc.badAmong/bad/2:
								return "bad"
							}
							return "ok"
						}, payload == "transient-100pct")
						held += r.held
						opens += r.opens
						calls += r.callsToOpen
						wall += r.wall
					}
					b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "wall-ms")
					b.ReportMetric(held.Seconds()/float64(b.N), "held-s")
					b.ReportMetric(float64(opens)/float64(b.N), "opens")
					if payload == "transient-100pct" {
						b.ReportMetric(float64(calls)/float64(b.N), "calls-to-open")
					}
				})
			}
		}
	}
}

type drainResult struct {
	wall, held         time.Duration
	opens, callsToOpen int
}

var (
	errBadPayload = errors.New("payload does not parse")
	errDown       = errors.New("dependency unavailable")
)

func breakerOpen(b *broker.Broker, typ string) bool {
	for _, in := range b.Breakers() {
		if in.Type == typ {
			return in.State == breaker.StateOpen
		}
	}
	return false
}

// drainBadPayloads enqueues jobs jobs whose payloads kind gives ("bad": fails FATAL, "down":
// fails transiently, else succeeds after work), runs a worker with slots slots until every job
// ran once (or, with untilOpen, until the breaker first opens), and moves the clock by OpenFor
// whenever the breaker is OPEN.
func drainBadPayloads(b *testing.B, cfg breaker.Config, jobs, slots int, work time.Duration,
	kind func(i int) string, untilOpen bool) drainResult {
	b.StopTimer()
	bu := brokertest.New(b, brokertest.Options{Breakers: &broker.BreakerOptions{Default: cfg}, Quiet: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for start := 0; start < jobs; start += 100 {
		req := &jobwirev1.EnqueueBatchRequest{}
		for i := start; i < min(jobs, start+100); i++ {
			req.Jobs = append(req.Jobs, &jobwirev1.JobSpec{Type: flaky, MaxAttempts: 1, Payload: []byte(kind(i))})
		}
		if _, err := bu.Producer.EnqueueBatch(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	var ran atomic.Int64
	w, err := worker.New(bu.Conn, worker.Options{ID: "bench", Concurrency: slots, ShutdownGrace: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle(flaky, func(ctx context.Context, j *worker.Job) error {
		defer ran.Add(1)
		switch string(j.Payload) {
		case "bad":
			return worker.Fatal(errBadPayload)
		case "down":
			return errDown
		}
		if work > 0 {
			time.Sleep(work)
		}
		return nil
	})
	done := make(chan error, 1)
	var r drainResult
	b.StartTimer()
	began := time.Now()
	go func() { done <- w.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Minute)
	for ran.Load() < int64(jobs) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs ran in 5 minutes", ran.Load(), jobs)
		}
		if breakerOpen(bu.Broker, flaky) {
			if r.opens == 0 {
				r.callsToOpen = int(ran.Load())
			}
			r.opens++
			if untilOpen {
				break
			}
			bu.Advance(cfg.OpenFor)
			r.held += cfg.OpenFor
		}
		time.Sleep(500 * time.Microsecond)
	}
	r.wall = time.Since(began)
	b.StopTimer()
	cancel()
	<-done
	return r
}
