// Command report is the worker of docs/workflows.md: it runs "report.build" jobs, reporting its
// progress as it goes and returning a summary as the job's result, until Ctrl-C (SIGINT) or
// SIGTERM.
//
//	jobwire enqueue --type report.build --payload '{"parts":5}'
//	go run ./examples/go/report
//	jobwire job wait 1
//
// It connects to $JOBWIRE_ADDR, or else 127.0.0.1:7070, with the token and TLS settings of the
// environment (docs/security.md#connecting-from-the-environment).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/worker"
)

// request is the payload of a report.build job.
type request struct {
	Parts int `json:"parts"`
}

// summary is the result of a report.build job.
type summary struct {
	Parts int `json:"parts"`
	Rows  int `json:"rows"`
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, client.SettingsFromEnv(nil), log); err != nil {
		log.Error("report worker failed", "error", err)
		os.Exit(1)
	}
}

// run works report.build jobs until ctx ends.
func run(ctx context.Context, env client.Settings, log *slog.Logger) error {
	opts, err := env.DialOptions()
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, env.Addr, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{ID: fmt.Sprintf("report-%d", os.Getpid()), Logger: log})
	if err != nil {
		return err
	}
	worker.HandleJSON(w, "report.build", build)
	return w.Run(ctx)
}

// build makes a report of req.Parts parts, saying how far it got after each.
func build(ctx context.Context, j *worker.Job, req request) error {
	parts := max(req.Parts, 1)
	rows := 0
	for part := 1; part <= parts; part++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows += 100 * part // the work of one part
		if err := j.SetProgress(float64(part)/float64(parts), fmt.Sprintf("part %d of %d", part, parts)); err != nil {
			return err
		}
	}
	return j.SetResultJSON(summary{Parts: parts, Rows: rows})
}
