// Command asynq measures Asynq (github.com/hibiken/asynq) on Redis the way jobwire-bench
// measures Jobwire, so that the two can be run side by side on one machine
// (scripts/vs-asynq.sh, docs/performance.md):
//
//   - e2e-1: one producer enqueues -jobs jobs, one Enqueue call each, waiting for each call,
//     while a server of -concurrency workers works them; timed from the first enqueue until
//     the last job's handler ran;
//   - latency: an open-loop producer enqueues one job at a time at -rate a second for
//     -duration; each job carries the time taken just before its enqueue, and its handler
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
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	scenario := flag.String("scenario", "e2e-1", "e2e-1 or latency")
	jobs := flag.Int("jobs", 5000, "e2e-1: jobs to enqueue")
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
	var mu sync.Mutex
	var latency []time.Duration
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(_ context.Context, t *asynq.Task) error {
		if p := t.Payload(); len(p) == 8 {
			if sent := int64(binary.BigEndian.Uint64(p)); sent != 0 {
				d := time.Since(time.Unix(0, sent))
				mu.Lock()
				latency = append(latency, d)
				mu.Unlock()
			}
		}
		if ran.Add(1) == int64(*jobs) && *scenario == "e2e-1" {
			close(all)
		}
		return nil
	})
	opt := asynq.RedisClientOpt{Addr: *addr}
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: *concurrency, TaskCheckInterval: *check,
		Logger: quiet{}, LogLevel: asynq.ErrorLevel})
	if err := srv.Start(mux); err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClient(opt)
	defer client.Close()

	switch *scenario {
	case "e2e-1":
		start := time.Now()
		for range *jobs {
			if _, err := client.Enqueue(asynq.NewTask("noop", make([]byte, 8))); err != nil {
				log.Fatal(err)
			}
		}
		<-all
		took := time.Since(start)
		fmt.Printf("asynq e2e-1 %d jobs %.2fs %.0f jobs/s (Concurrency %d)\n", *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *concurrency)
	case "latency":
		produce(client, *rate, *duration)
		time.Sleep(500 * time.Millisecond) // the last jobs start
		mu.Lock()
		xs := slices.Clone(latency)
		mu.Unlock()
		slices.Sort(xs)
		if len(xs) == 0 {
			log.Fatal("no job started")
		}
		pct := func(p float64) float64 { return float64(xs[int(math.Ceil(p*float64(len(xs))))-1]) / 1e6 }
		fmt.Printf("asynq latency %d/s: %d samples p50 %.2f ms p99 %.2f ms\n", *rate, len(xs), pct(0.5), pct(0.99))
	default:
		log.Fatalf("unknown scenario %q", *scenario)
	}
}

// produce enqueues one job at a time at rate a second for d, in an open loop as jobwire-bench's
// latency scenario does: the i-th enqueue is due at i/rate seconds and runs in a goroutine of
// its own, so a slow one delays none of the next. The jobs of the first second carry no time
// and are not counted. It returns once every enqueue has returned.
func produce(client *asynq.Client, rate int, d time.Duration) {
	interval := time.Second / time.Duration(rate)
	total := int(d / interval)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		measure := due.Sub(start) >= time.Second
		wg.Go(func() {
			p := make([]byte, 8)
			if measure {
				binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
			}
			if _, err := client.Enqueue(asynq.NewTask("noop", p)); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
}

// quiet is a logger that drops what the server logs below errors' level.
type quiet struct{}

func (quiet) Debug(...any)      {}
func (quiet) Info(...any)       {}
func (quiet) Warn(...any)       {}
func (quiet) Error(args ...any) { log.Print(args...) }
func (quiet) Fatal(args ...any) { log.Fatal(args...) }
