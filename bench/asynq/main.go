// Command asynq measures Asynq (github.com/hibiken/asynq) on Redis the way jobwire-bench
// measures Jobwire, so that the two can be run side by side on one machine
// (scripts/vs-asynq.sh, docs/performance.md):
//
//   - e2e-1: -producers producers (1 by default) enqueue -jobs jobs between them, one Enqueue
//     call each, each waiting for its call, while a server of -concurrency workers works them;
//     timed from the first enqueue until the last job's handler ran;
//   - drain: 64 producers enqueue -jobs jobs before the server starts; timed from the server's
//     start until the last job's handler ran;
//   - latency: an open-loop producer (openloop.Produce) enqueues one job at a time at -rate a
//     second for -duration; each job carries the time taken just before its enqueue, and its handler
//     records how long it took to start (the first second is not counted).
//
// Handlers do nothing. Each run flushes the Redis database first. This is a module of its own
// so that Jobwire does not depend on Asynq.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobwire/jobwire/bench/openloop"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	scenario := flag.String("scenario", "e2e-1", "e2e-1, drain or latency")
	jobs := flag.Int("jobs", 5000, "e2e-1 and drain: jobs to enqueue")
	producers := flag.Int("producers", 1, "e2e-1: producers enqueueing at once, one job a call each")
	concurrency := flag.Int("concurrency", 512, "the server's Concurrency")
	check := flag.Duration("check-interval", 0, "the server's TaskCheckInterval: how long it sleeps after finding every queue empty (0: Asynq's default, 1s)")
	rate := flag.Int("rate", 1000, "latency: jobs a second")
	duration := flag.Duration("duration", 5*time.Second, "latency: how long to produce")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	_ = rdb.Close()

	var ran atomic.Int64
	all := make(chan struct{})
	var latency openloop.Latencies
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(_ context.Context, t *asynq.Task) error {
		if p := t.Payload(); len(p) == 8 {
			latency.Started(int64(binary.BigEndian.Uint64(p)))
		}
		if ran.Add(1) == int64(*jobs) && *scenario != "latency" {
			close(all)
		}
		return nil
	})
	opt := asynq.RedisClientOpt{Addr: *addr}
	client := asynq.NewClient(opt)
	defer client.Close()
	enqueue := func(int) {
		if _, err := client.Enqueue(asynq.NewTask("noop", make([]byte, 8))); err != nil {
			log.Fatal(err)
		}
	}
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: *concurrency, TaskCheckInterval: *check,
		Logger: quiet{}, LogLevel: asynq.ErrorLevel})
	start := func() {
		if err := srv.Start(mux); err != nil {
			log.Fatal(err)
		}
	}
	defer srv.Shutdown()

	switch *scenario {
	case "e2e-1":
		start()
		began := time.Now()
		openloop.Split(*jobs, *producers, enqueue)
		<-all
		took := time.Since(began)
		fmt.Printf("asynq e2e-1 %d jobs %.2fs %.0f jobs/s (Concurrency %d, %d producers)\n", *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *concurrency, *producers)
	case "drain":
		openloop.Split(*jobs, 64, enqueue)
		began := time.Now()
		start()
		<-all
		took := time.Since(began)
		fmt.Printf("asynq drain %d jobs %.2fs %.0f jobs/s (Concurrency %d)\n", *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *concurrency)
	case "latency":
		start()
		openloop.Produce(*rate, *duration, func(sent time.Time) {
			p := make([]byte, 8)
			if !sent.IsZero() {
				binary.BigEndian.PutUint64(p, uint64(sent.UnixNano()))
			}
			if _, err := client.Enqueue(asynq.NewTask("noop", p)); err != nil {
				log.Fatal(err)
			}
		})
		line, err := latency.Report("asynq", *rate)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(line)
	default:
		log.Fatalf("unknown scenario %q", *scenario)
	}
}

// quiet is a logger that drops what the server logs below errors' level.
type quiet struct{}

func (quiet) Debug(...any)      {}
func (quiet) Info(...any)       {}
func (quiet) Warn(...any)       {}
func (quiet) Error(args ...any) { log.Print(args...) }
func (quiet) Fatal(args ...any) { log.Fatal(args...) }
