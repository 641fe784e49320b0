// Command quickstart shows both sides of Jobwire in one Go program: a producer that enqueues jobs
// through the client package and a worker that runs them through the worker package.
//
// Start a broker, then run the example:
//
//	jobwire serve --db /tmp/quickstart.db &
//	go run ./examples/go/quickstart -addr 127.0.0.1:7070
//
// It enqueues a few "greet" jobs, runs them, waits until the broker records each as succeeded,
// then shuts the worker down gracefully and exits. In a real deployment producer and worker are
// separate processes; the worker then runs until SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// greetArgs is the payload of a greet job.
type greetArgs struct {
	Name string `json:"name"`
}

func main() {
	addr := flag.String("addr", client.DefaultAddr, "broker address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, log); err != nil {
		log.Error("quickstart failed", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, log *slog.Logger) error {
	stopWorker, err := startWorker(addr, log)
	if err != nil {
		return err
	}
	err = produce(ctx, addr, log)
	return errors.Join(err, stopWorker())
}

// produce enqueues a few greet jobs and waits until each is finished.
func produce(ctx context.Context, addr string, log *slog.Logger) error {
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var ids []int64
	for _, name := range []string{"Ada", "Grace", "Zoë"} {
		res, err := c.EnqueueJSON(ctx, "greet", greetArgs{Name: name}, client.MaxAttempts(3))
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		log.Info("enqueued", "job_id", res.ID, "name", name)
		ids = append(ids, res.ID)
	}
	for _, id := range ids {
		j, err := waitFinal(ctx, c, id)
		if err != nil {
			return err
		}
		log.Info("finished", "job_id", id, "state", j.State, "attempts", j.Attempts)
	}
	return nil
}

// startWorker runs a worker in the background; the returned function stops it gracefully and
// reports how the stop went.
func startWorker(addr string, log *slog.Logger) (func() error, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	w, err := worker.New(conn, worker.Options{ID: "quickstart", Concurrency: 2, ShutdownGrace: 5 * time.Second, Logger: log})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	worker.HandleJSON(w, "greet", func(ctx context.Context, j *worker.Job, args greetArgs) error {
		if args.Name == "" {
			return worker.Fatal(errors.New("greet: empty name"))
		}
		fmt.Printf("Hello, %s! (job %d, attempt %d)\n", args.Name, j.ID, j.Attempt)
		return nil
	})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	stop := func() error {
		cancel()
		err := <-done
		return errors.Join(err, conn.Close())
	}
	return stop, nil
}

// waitFinal polls the job until it reaches a final state or ctx ends.
func waitFinal(ctx context.Context, c *client.Client, id int64) (*job.Job, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if j.State.Final() {
			return j, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
