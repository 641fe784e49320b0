package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/worker"
)

// startBroker runs the broker as `jobwire serve` does on db until ctx ends; addr is "" when it
// stopped before it was ready, with its error in done.
func startBroker(ctx context.Context, db string) (addr string, done chan error) {
	cfg := config.Defaults()
	cfg.DB = db
	return startBrokerWith(ctx, cfg)
}

// startBrokerWith runs a broker of cfg on a loopback port, with no HTTP listener.
func startBrokerWith(ctx context.Context, cfg config.Config) (addr string, done chan error) {
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", config.HTTPOff
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan string, 1)
	done = make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, quiet, func(a app.Addrs) { ready <- a.GRPC.String() }) }()
	select {
	case addr = <-ready:
	case err := <-done:
		done <- err
	}
	return addr, done
}

// The broker runs on PostgreSQL when --db is a postgres:// URL: a job enqueued over gRPC is
// run by a worker to SUCCEEDED, a failing one retried and dead-lettered, and the jobs outlive a
// restart of the broker. A second broker serves the same database beside it: a job enqueued
// through it runs on the first broker's worker.
func TestBrokerOnPostgresEndToEnd(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	addr, done := startBroker(bctx, db)
	if addr == "" {
		t.Fatalf("broker on PostgreSQL did not start: %v", <-done)
	}

	ctx2, stop2 := context.WithCancel(ctx)
	addr2, done2 := startBroker(ctx2, db)
	if addr2 == "" {
		t.Fatalf("a second broker on the same database did not start: %v", <-done2)
	}
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := client.Dial(ctx, addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// Enqueued through the second broker, run by the worker of the first.
	ok, err := other.EnqueueJSON(ctx, "email.send", map[string]string{"to": "ada@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.EnqueueJSON(ctx, "email.send", map[string]string{}, client.MaxAttempts(2))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(c.Conn(), worker.Options{ID: "pg-worker", Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	worker.HandleJSON(w, "email.send", func(ctx context.Context, j *worker.Job, e map[string]string) error {
		if e["to"] == "" {
			return worker.Fatal(errors.New("no recipient"))
		}
		return nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	waitState(ctx, t, c, ok.ID, job.StateSucceeded)
	dead := waitState(ctx, t, c, bad.ID, job.StateDead)
	if dead.DeadReason != job.DeadFatal || len(dead.History) != 1 {
		t.Fatalf("fatal job: %+v, want DEAD by FATAL after one attempt", dead)
	}
	stopWorker()
	<-wdone
	stop2()
	if err := <-done2; err != nil {
		t.Fatalf("second broker: %v", err)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatalf("broker: %v", err)
	}
	addr, done = startBroker(ctx, db)
	if addr == "" {
		t.Fatalf("broker did not start again: %v", <-done)
	}
	c2, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	again := waitState(ctx, t, c2, ok.ID, job.StateSucceeded)
	if len(again.History) != 1 || again.History[0].WorkerID != "pg-worker" {
		t.Fatalf("job after a restart: %+v", again)
	}
	cancel()
	<-done
}

// waitState polls a job until it reaches want.
func waitState(ctx context.Context, t *testing.T, c *client.Client, id int64, want job.State) *job.Job {
	t.Helper()
	for {
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatalf("get job %d: %v", id, err)
		}
		if j.State == want {
			return j
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %d is %s, never reached %s", id, j.State, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
