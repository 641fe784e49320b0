package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/worker"
)

type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

var errMailboxFull = errors.New("mailbox full")

// A worker process registers its handlers, then runs until it is told to stop. Stopping is
// graceful: running jobs get Options.ShutdownGrace to finish. The connection comes from
// client.Dial, which sets the SDK's gRPC options (TLS and tokens, fixed flow-control windows);
// any grpc.ClientConnInterface works.
func Example() {
	c, err := client.Dial(context.Background(), "localhost:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	w, err := worker.New(c.Conn(), worker.Options{
		ID:            "mailer-1",
		Queues:        []string{"mail"},
		Concurrency:   8,
		ShutdownGrace: 30 * time.Second,
		Logger:        slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}

	worker.HandleJSON(w, "email.send", func(ctx context.Context, j *worker.Job, args EmailArgs) error {
		if args.To == "" {
			// No attempt can fix a job without a recipient: straight to the dead-letter queue.
			return worker.Fatal(errors.New("email.send: empty recipient"))
		}
		// Any other error is retried with the broker's backoff.
		return send(ctx, args)
	})
	w.Handle("cache.warm", func(ctx context.Context, j *worker.Job) error {
		return nil
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func send(context.Context, EmailArgs) error { return nil }

// A handler decides how its failure is treated through the error it returns.
func ExampleRetryAfter() {
	err := worker.RetryAfter(fmt.Errorf("smtp: %w", errMailboxFull), 10*time.Minute)
	f := worker.Classify(err)
	fmt.Println(f.Fatal, f.ErrorType, f.RetryAfter)
	// Output: false error 10m0s
}

func ExampleClassify() {
	var args EmailArgs
	decodeErr := fmt.Errorf("decode: %w", json.Unmarshal([]byte(`{"to":`), &args))
	f := worker.Classify(decodeErr)
	fmt.Println(f.Fatal, f.ErrorType)

	f = worker.Classify(worker.Fatal(errMailboxFull))
	fmt.Println(f.Fatal, f.Message)
	// Output:
	// true *json.SyntaxError
	// true mailbox full
}
