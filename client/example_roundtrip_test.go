package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// A whole round trip: start a broker, run a worker, enqueue two jobs and read what became of
// them. The first succeeds; the second fails with a fatal error and goes straight to the DLQ.
func Example_roundTrip() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "jobwire-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The broker, on a free loopback port and a fresh database.
	cfg := config.Defaults()
	cfg.Listen, cfg.DB, cfg.HTTPListen = "127.0.0.1:0", filepath.Join(dir, "jobwire.db"), config.HTTPOff
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	addr := make(chan string, 1)
	brokerDone := make(chan error, 1)
	go func() { brokerDone <- app.Run(ctx, cfg, quiet, func(a app.Addrs) { addr <- a.GRPC.String() }) }()

	c, err := client.Dial(ctx, <-addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A worker with one handler.
	w, err := worker.New(c.Conn(), worker.Options{ID: "example-worker", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	type greeting struct{ Name string }
	worker.HandleJSON(w, "greet", func(ctx context.Context, j *worker.Job, g greeting) error {
		if g.Name == "" {
			return worker.Fatal(errors.New("nobody to greet"))
		}
		return nil
	})
	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(workerCtx) }()

	for _, name := range []string{"Ada", ""} {
		res, err := c.EnqueueJSON(ctx, "greet", greeting{Name: name})
		if err != nil {
			log.Fatal(err)
		}
		j := waitFinished(ctx, c, res.ID)
		fmt.Printf("job %d: %s after %d attempt(s)", j.ID, j.State, j.Attempts)
		if j.State == job.StateDead {
			fmt.Printf(", %s: %s", j.DeadReason, j.LastErrorMessage)
		}
		fmt.Println()
	}

	stopWorker()
	<-workerDone
	cancel()
	<-brokerDone
	// Output:
	// job 1: SUCCEEDED after 1 attempt(s)
	// job 2: DEAD after 1 attempt(s), FATAL: nobody to greet
}

func waitFinished(ctx context.Context, c *client.Client, id int64) *job.Job {
	for {
		j, err := c.Get(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		if j.State.Final() {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
}
