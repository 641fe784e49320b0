// Command quickstart is the worker of the README's quick start: it runs "email.send" jobs until
// Ctrl-C (SIGINT) or SIGTERM, then stops gracefully, letting a job that is running finish.
//
// With a broker running (make run), enqueue a job and start the worker:
//
//	go run ./cmd/jobwire enqueue --type email.send --payload '{"to":"ada@example.com"}'
//	go run ./examples/go/quickstart
//	go run ./cmd/jobwire job get 1
//
// The worker connects to -addr, by default $JOBWIRE_ADDR or else 127.0.0.1:7070, with the token
// and TLS settings of the environment (JOBWIRE_TOKEN, JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT,
// JOBWIRE_TLS_KEY; see docs/security.md#connecting-from-the-environment), so it also reaches a
// broker with TLS and auth on. A TLS setting or token the broker refuses stops it with an
// error that says what to set. It works as -id, by default $JOBWIRE_WORKER_ID or else
// quickstart-HOST-PID, so that two of them are told apart. Sending an email
// is only printed here; a handler that reaches a real mail server returns its error, and the
// broker retries the job with backoff.
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

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/worker"
)

// email is the payload of an email.send job.
type email struct {
	To string `json:"to"`
}

func main() {
	env := client.SettingsFromEnv(nil)
	addr := flag.String("addr", env.Addr, "broker address (env JOBWIRE_ADDR)")
	id := flag.String("id", defaultID(os.Getenv, os.Hostname, os.Getpid()), "worker id (env JOBWIRE_WORKER_ID)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env.Addr = *addr
	if err := run(ctx, env, *id, log); err != nil {
		log.Error("quickstart worker failed", "error", err)
		os.Exit(1)
	}
}

// defaultID is $JOBWIRE_WORKER_ID, or else an id of this process: workers that share an id
// would be taken for one worker.
func defaultID(getenv func(string) string, hostname func() (string, error), pid int) string {
	if id := getenv("JOBWIRE_WORKER_ID"); id != "" {
		return id
	}
	host, err := hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("quickstart-%s-%d", host, pid)
}

// run works email.send jobs until ctx ends.
func run(ctx context.Context, env client.Settings, id string, log *slog.Logger) error {
	opts, err := env.DialOptions()
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, env.Addr, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{ID: id, Concurrency: 4, Logger: log})
	if err != nil {
		return err
	}
	worker.HandleJSON(w, "email.send", func(ctx context.Context, j *worker.Job, e email) error {
		if e.To == "" {
			return worker.Fatal(errors.New("email.send: no recipient")) // straight to the DLQ
		}
		fmt.Printf("sent an email to %s (job %d, attempt %d)\n", e.To, j.ID, j.Attempt)
		return nil
	})
	log.Info("worker running; Ctrl-C stops it", "addr", env.Addr, "id", id)
	return w.Run(ctx)
}
