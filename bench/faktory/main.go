// Command faktory measures Faktory (github.com/contribsys/faktory) the way jobwire-bench
// measures Jobwire, so that the two can be run side by side on one machine
// (scripts/vs-faktory.sh, docs/performance.md):
//
//   - e2e-1: one producer pushes -jobs jobs, one Push each, waiting for each, while a worker
//     process of -concurrency fetchers (faktory_worker_go) works them; timed from the first
//     push until the last job's handler ran;
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
	"strconv"
	"sync/atomic"
	"time"

	faktory "github.com/contribsys/faktory/client"
	worker "github.com/contribsys/faktory_worker_go"

	"github.com/jobwire/jobwire/bench/openloop"
)

func main() {
	scenario := flag.String("scenario", "e2e-1", "e2e-1 or latency")
	jobs := flag.Int("jobs", 5000, "e2e-1: jobs to push")
	concurrency := flag.Int("concurrency", 20, "the worker's Concurrency (faktory_worker_go's default is 20)")
	rate := flag.Int("rate", 1000, "latency: jobs a second")
	duration := flag.Duration("duration", 5*time.Second, "latency: how long to produce")
	flag.Parse()
	if *scenario != "e2e-1" && *scenario != "latency" {
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
	all := make(chan struct{})
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
		if ran.Add(1) == int64(*jobs) && *scenario == "e2e-1" {
			close(all)
		}
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran0 := make(chan error, 1)
	go func() { ran0 <- mgr.RunWithContext(ctx) }()
	defer func() {
		stop()
		<-ran0
	}()
	waitWorking(cl)

	switch *scenario {
	case "e2e-1":
		start := time.Now()
		for range *jobs {
			if err := cl.Push(faktory.NewJob("noop", "")); err != nil {
				log.Fatal(err)
			}
		}
		<-all
		took := time.Since(start)
		fmt.Printf("faktory e2e-1 %d jobs %.2fs %.0f jobs/s (Concurrency %d)\n", *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *concurrency)
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
