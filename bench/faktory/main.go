// Command faktory measures Faktory (github.com/contribsys/faktory) the way jobwire-bench
// measures Jobwire, so that the two can be run side by side on one machine
// (scripts/vs-faktory.sh, docs/performance.md):
//
//   - e2e-1: -producers producers (1 by default, each on a connection of its own) push -jobs
//     jobs between them, one Push each, each waiting for its push, while a worker process of
//     -concurrency fetchers (faktory_worker_go) works them; timed from the first push until the
//     last job's handler ran;
//   - e2e-100: the same with 4 producers pushing 100 jobs a call (PushBulk);
//   - drain: 4 producers push -jobs jobs, 1,000 a call, before the worker process starts;
//     timed from the first job's start until the last job's handler ran, and from the middle
//     job's (faktory_worker_go starts each fetcher after a random delay of up to 2 s, so the
//     first second or two of a drain runs on fewer fetchers: the second half is the steady
//     rate);
//   - latency: an open-loop producer pushes one job at a time at -rate a second for -duration;
//     each job carries the time taken just before its push, and its handler records how long
//     it took to start (the first second is not counted).
//
// Handlers do nothing. Each run flushes the server first. The server is the one FAKTORY_URL
// names. This is a module of its own so that Jobwire does not depend on Faktory.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	faktory "github.com/contribsys/faktory/client"
	worker "github.com/contribsys/faktory_worker_go"

	"github.com/jobwire/jobwire/bench/openloop"
)

func main() {
	scenario := flag.String("scenario", "e2e-1", "e2e-1, e2e-100, drain or latency")
	jobs := flag.Int("jobs", 5000, "e2e-1, e2e-100 and drain: jobs to push")
	producers := flag.Int("producers", 1, "e2e-1: producers pushing at once, one job a call each")
	concurrency := flag.Int("concurrency", 20, "the worker's Concurrency (faktory_worker_go's default is 20)")
	rate := flag.Int("rate", 1000, "latency: jobs a second")
	duration := flag.Duration("duration", 5*time.Second, "latency: how long to produce")
	flag.Parse()
	if !slices.Contains([]string{"e2e-1", "e2e-100", "drain", "latency"}, *scenario) {
		log.Fatalf("unknown scenario %q", *scenario)
	}
	cl, err := faktory.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Flush(); err != nil {
		log.Fatal(err)
	}

	var ran atomic.Int64
	all, first, middle := make(chan struct{}), make(chan time.Time, 1), make(chan time.Time, 1)
	var latency openloop.Latencies
	mgr := worker.NewManager()
	mgr.Concurrency = *concurrency
	mgr.Logger = quiet{}
	mgr.Register("noop", func(_ context.Context, args ...any) error {
		if len(args) == 1 {
			if s, ok := args[0].(string); ok && s != "" {
				sent, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return err
				}
				latency.Started(sent)
			}
		}
		switch n := ran.Add(1); {
		case n == 1:
			first <- time.Now()
		case n == int64(*jobs/2):
			middle <- time.Now()
		case n == int64(*jobs) && *scenario != "latency":
			close(all)
		}
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran0 := make(chan error, 1)
	defer func() {
		stop()
		<-ran0
	}()
	if *scenario == "drain" {
		pool, err := faktory.NewPool(4)
		if err != nil {
			log.Fatal(err)
		}
		pushAll(pool, *jobs, 1000, 4)
	}
	go func() { ran0 <- mgr.RunWithContext(ctx) }()
	if *scenario != "drain" {
		waitWorking(cl)
	}

	switch *scenario {
	case "e2e-1", "e2e-100":
		per, prods := 1, *producers
		if *scenario == "e2e-100" {
			per, prods = 100, 4
		}
		pool, err := faktory.NewPool(prods)
		if err != nil {
			log.Fatal(err)
		}
		start := time.Now()
		pushAll(pool, *jobs, per, prods)
		<-all
		took := time.Since(start)
		fmt.Printf("faktory %s %d jobs %.2fs %.0f jobs/s (Concurrency %d, %d producers)\n", *scenario, *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *concurrency, prods)
	case "drain":
		<-all
		start, mid := <-first, <-middle
		took, half := time.Since(start), time.Since(mid)
		fmt.Printf("faktory drain %d jobs %.2fs %.0f jobs/s (Concurrency %d; the second half %.0f jobs/s)\n",
			*jobs, took.Seconds(), float64(*jobs)/took.Seconds(), *concurrency, float64(*jobs-*jobs/2)/half.Seconds())
	case "latency":
		produce(*rate, *duration)
		line, err := latency.Report("faktory", *rate)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(line)
	}
}

// waitWorking waits until the worker process connected and its fetchers all started:
// faktory_worker_go delays each fetcher's first fetch by up to 2 s at random (against a
// thundering herd), and the first jobs must not be timed while they still wait.
func waitWorking(cl *faktory.Client) {
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		info, err := cl.Info()
		if err != nil {
			log.Fatal(err)
		}
		if srv, ok := info["server"].(map[string]any); ok {
			if n, ok := srv["connections"].(float64); ok && n > 1 {
				time.Sleep(2100 * time.Millisecond)
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Fatal("the worker did not connect within 5s")
}

// pushAll pushes n jobs, per a call (the last call the rest), from producers goroutines.
func pushAll(pool *faktory.Pool, n, per, producers int) {
	openloop.Split((n+per-1)/per, producers, func(i int) { push(pool, min(per, n-i*per)) })
}

// push pushes n jobs in one call: Push for one, PushBulk for more.
func push(pool *faktory.Pool, n int) {
	err := pool.With(func(c *faktory.Client) error {
		if n == 1 {
			return c.Push(faktory.NewJob("noop", ""))
		}
		jobs := make([]*faktory.Job, n)
		for i := range jobs {
			jobs[i] = faktory.NewJob("noop", "")
		}
		refused, err := c.PushBulk(jobs)
		if err == nil && len(refused) > 0 {
			err = fmt.Errorf("PushBulk refused %d jobs", len(refused))
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// produce pushes one job at a time at rate a second for d (openloop.Produce), each on a
// connection of its own from a pool, so a slow push delays none of the next.
func produce(rate int, d time.Duration) {
	pool, err := faktory.NewPool(64)
	if err != nil {
		log.Fatal(err)
	}
	openloop.Produce(rate, d, func(at time.Time) {
		sent := ""
		if !at.IsZero() {
			sent = strconv.FormatInt(at.UnixNano(), 10)
		}
		if err := pool.With(func(c *faktory.Client) error { return c.Push(faktory.NewJob("noop", sent)) }); err != nil {
			log.Fatal(err)
		}
	})
}

// quiet is a logger that drops what the worker logs below errors' level.
type quiet struct{}

func (quiet) Debug(...any)              {}
func (quiet) Debugf(string, ...any)     {}
func (quiet) Info(...any)               {}
func (quiet) Infof(string, ...any)      {}
func (quiet) Warn(...any)               {}
func (quiet) Warnf(string, ...any)      {}
func (quiet) Error(args ...any)         { log.Print(args...) }
func (quiet) Errorf(f string, a ...any) { log.Printf(f, a...) }
func (quiet) Fatal(args ...any)         { log.Fatal(args...) }
func (quiet) Fatalf(f string, a ...any) { log.Fatalf(f, a...) }
