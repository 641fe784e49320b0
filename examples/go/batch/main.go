// Command batch shows a batch with callbacks: it enqueues -n "import.row" jobs as one batch
// whose completion callback is a "import.report" job, works them all with a Go worker, and
// prints what the callback was told (the batch's counts and its failed jobs) before it exits.
// Every row whose number is a multiple of 5 fails for good, so the batch completes with dead
// jobs and its success callback is not enqueued.
//
// With a broker running (make run):
//
//	go run ./examples/go/batch
//
// It connects to $JOBWIRE_ADDR, or else 127.0.0.1:7070, with the token and TLS settings of the
// environment (docs/security.md#connecting-from-the-environment).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/worker"
)

// row is the payload of an import.row job.
type row struct {
	N int `json:"n"`
}

func main() {
	n := flag.Int("n", 20, "rows in the batch")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *n); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int) error {
	c, err := client.DialEnv(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	specs := make([]client.JobSpec, n)
	for i := range specs {
		payload, _ := json.Marshal(row{N: i + 1})
		specs[i] = client.NewJobSpec("import.row", payload, client.MaxAttempts(1))
	}
	id, _, err := c.EnqueueAsBatch(ctx, client.BatchOptions{Description: "import of " + fmt.Sprint(n) + " rows",
		OnSuccess:  &client.JobSpec{Type: "import.publish"},
		OnComplete: &client.JobSpec{Type: "import.report"}}, specs)
	if err != nil {
		return err
	}
	fmt.Printf("batch %d: %d rows enqueued\n", id, n)

	reported := make(chan client.BatchCallback, 1)
	w, err := worker.New(c.Conn(), worker.Options{ID: fmt.Sprintf("batch-example-%d", os.Getpid()), Concurrency: 8,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	w.Handle("import.row", func(ctx context.Context, j *worker.Job) error {
		var r row
		if err := json.Unmarshal(j.Payload, &r); err != nil {
			return worker.Fatal(err)
		}
		if r.N%5 == 0 {
			return worker.Fatal(fmt.Errorf("row %d is malformed", r.N))
		}
		return nil
	})
	w.Handle("import.report", func(ctx context.Context, j *worker.Job) error {
		cb, ok := client.ParseBatchCallback(j.Metadata)
		if !ok {
			return worker.Fatal(errors.New("not a batch callback"))
		}
		if cb.Batch != id {
			return nil // an earlier run's batch
		}
		select {
		case reported <- cb:
		default:
		}
		return nil
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var cb client.BatchCallback
	select {
	case cb = <-reported:
	case <-ctx.Done():
		stop()
		return fmt.Errorf("no callback: %w", ctx.Err())
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Printf("batch %d %s: %d of %d succeeded, %d dead, %d cancelled; failed jobs %v\n",
		cb.Batch, cb.Kind, cb.Succeeded, cb.Total, cb.Dead, cb.Cancelled, cb.Failed)
	return nil
}
