// Command river measures River (github.com/riverqueue/river) on PostgreSQL the way
// jobwire-bench measures Jobwire, so that the two can be run side by side on one machine and
// one database (docs/performance.md):
//
//   - drain: -jobs jobs inserted (InsertMany, 1,000 at a time), then a client works them;
//   - e2e-100: four producers insert batches of 100 while a client works them;
//   - e2e-1: one producer inserts one job a call (Insert), waiting for each, while a client
//     works them;
//   - latency: an open-loop producer inserts one job at a time at -rate a second for
//     -duration; each job carries the time taken just before its insert, and its worker
//     records how long it took to start (the first second is not counted).
//
// Handlers do nothing. A run is timed from the client's start until River reports the last
// job completed. Each run creates a schema of its own and migrates it.
//
// This is a module of its own so that Jobwire does not depend on River.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/jobwire/jobwire/bench/openloop"
)

// noopArgs is the benchmark's job; Sent is when a latency job was inserted (Unix ns).
type noopArgs struct {
	N    int   `json:"n"`
	Sent int64 `json:"sent"`
}

func (noopArgs) Kind() string { return "noop" }

// noopWorker does nothing but record how long a latency job took to start.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	latency *openloop.Latencies
}

func (w noopWorker) Work(_ context.Context, j *river.Job[noopArgs]) error {
	w.latency.Started(j.Args.Sent)
	return nil
}

func main() {
	url := flag.String("db", "", "PostgreSQL URL (required)")
	scenario := flag.String("scenario", "drain", "drain, e2e-100, e2e-1 or latency")
	jobs := flag.Int("jobs", 20000, "jobs of drain, e2e-100 and e2e-1")
	workers := flag.Int("workers", 512, "the queue's MaxWorkers")
	cooldown := flag.Duration("fetch-cooldown", 0, "Config.FetchCooldown (0: River's default)")
	poll := flag.Duration("fetch-poll", 0, "Config.FetchPollInterval (0: River's default)")
	rate := flag.Int("rate", 1000, "latency: jobs a second")
	duration := flag.Duration("duration", 5*time.Second, "latency: how long to produce")
	flag.Parse()
	if *url == "" {
		log.Fatal("-db is required")
	}
	ctx := context.Background()
	rc, pool, schema := setup(ctx, *url, *workers, *cooldown, *poll)
	defer dropSchema(*url, schema)
	defer pool.Close()
	var latency openloop.Latencies
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{latency: &latency})
	client, err := river.NewClient(riverpgxv5.New(pool), withWorkers(rc, ws))
	if err != nil {
		log.Fatal(err)
	}
	switch *scenario {
	case "drain", "e2e-100", "e2e-1":
		took := throughput(ctx, client, *scenario, *jobs)
		fmt.Printf("river %s %d jobs %.2fs %.0f jobs/s (MaxWorkers %d)\n", *scenario, *jobs, took.Seconds(),
			float64(*jobs)/took.Seconds(), *workers)
	case "latency":
		if err := client.Start(ctx); err != nil {
			log.Fatal(err)
		}
		produce(ctx, client, *rate, *duration)
		line, err := latency.Report("river", *rate)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(line)
	default:
		log.Fatalf("unknown scenario %q", *scenario)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = client.Stop(sctx)
}

// setup creates a fresh schema, migrates it and returns the client's configuration (without
// workers), a pool on that schema and the schema's name.
func setup(ctx context.Context, url string, workers int, cooldown, poll time.Duration) (*river.Config, *pgxpool.Pool, string) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("river_bench_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	mig, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	rc := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}}
	if cooldown > 0 {
		rc.FetchCooldown = cooldown
	}
	if poll > 0 {
		rc.FetchPollInterval = poll
	}
	return rc, pool, schema
}

// dropSchema drops the run's schema once its pool is closed, so runs leave nothing behind.
func dropSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Printf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		log.Printf("drop schema %s: %v", schema, err)
	}
}

func withWorkers(c *river.Config, ws *river.Workers) *river.Config {
	c.Workers = ws
	return c
}

// throughput runs drain, e2e-100 or e2e-1 and returns how long the client took to complete every job.
func throughput(ctx context.Context, client *river.Client[pgx.Tx], scenario string, jobs int) time.Duration {
	batch := func(n int) []river.InsertManyParams {
		ps := make([]river.InsertManyParams, n)
		for i := range ps {
			ps[i] = river.InsertManyParams{Args: noopArgs{N: i}}
		}
		return ps
	}
	if scenario == "drain" {
		for i := 0; i < jobs; i += 1000 {
			if _, err := client.InsertMany(ctx, batch(min(1000, jobs-i))); err != nil {
				log.Fatal(err)
			}
		}
	}
	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: jobs + 1})
	defer cancel()
	var done atomic.Int64
	finished := make(chan struct{})
	go func() {
		for range completed {
			if done.Add(1) == int64(jobs) {
				close(finished)
				return
			}
		}
	}()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if scenario == "e2e-100" {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for i := 0; i < jobs/4; i += 100 {
					if _, err := client.InsertMany(ctx, batch(100)); err != nil {
						log.Fatal(err)
					}
				}
			})
		}
		wg.Wait()
	}
	if scenario == "e2e-1" {
		for i := range jobs {
			if _, err := client.Insert(ctx, noopArgs{N: i}, nil); err != nil {
				log.Fatal(err)
			}
		}
	}
	<-finished
	return time.Since(start)
}

// produce inserts one job at a time at rate a second for d (openloop.Produce).
func produce(ctx context.Context, client *river.Client[pgx.Tx], rate int, d time.Duration) {
	openloop.Produce(rate, d, func(sent time.Time) {
		args := noopArgs{}
		if !sent.IsZero() {
			args.Sent = sent.UnixNano()
		}
		if _, err := client.Insert(ctx, args, nil); err != nil {
			log.Fatal(err)
		}
	})
}
