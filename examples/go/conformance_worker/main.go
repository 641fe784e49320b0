// Command conformance_worker is the Go worker that the conformance suite drives, the counterpart of
// sdks/python/examples/conformance_worker.py and sdks/node/examples/conformance_worker.js. Each job
// type exercises one protocol path; all three workers behave alike so that one suite can check
// every language.
//
// Environment:
//
//	JOBWIRE_ADDR              broker address (default 127.0.0.1:7070)
//	JOBWIRE_WORKER_ID         worker id (default host-pid)
//	JOBWIRE_CAPACITY          concurrent jobs (default 8)
//	JOBWIRE_QUEUES            comma-separated queues to take from (default: every queue)
//	JOBWIRE_GRACE_SECONDS     shutdown grace period (default 30)
//	JOBWIRE_CONFORMANCE_DIR   where counters and marker files go (default: a new temp dir)
//	JOBWIRE_TOKEN             API token for a broker with auth on
//	JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY
//	                          connect over TLS: CA to trust, client certificate and key (mutual TLS)
//
// Job types (JSON payloads):
//
//	echo              succeeds once the payload decodes; writes the payload's bytes to <dir>/echo-<job_id>
//	fatal             fails with a *main.FatalByDesignError marked fatal
//	flaky             {"key": K, "fail_times": N}: fails transiently N times per key, then succeeds;
//	                  the count lives in <dir>/flaky-<key> so it survives restarts
//	always_transient  fails with a plain error (transient)
//	retry_after       {"seconds": S}: fails asking for a retry after S seconds
//	slow              {"ms": M}: sleeps M ms, stopping early on a cancel
//	wait_cancel       waits for a cancel, then writes <dir>/cancelled-<job_id> holding the reason
//	block             {"marker": NAME}: writes <dir>/started-<NAME>, then waits for a cancel
//	result            {"steps": N, "result_bytes": M}: reports progress k/N with the message
//	                  "step k of N" for k = 1..N, then succeeds returning the payload's bytes as
//	                  its result, or, when M > 0, M bytes of "x"
//
// SIGTERM or SIGINT starts a graceful shutdown; the process exits 0 once it completes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/worker"
)

// FatalByDesignError is what the fatal job type fails with. It has its own type so that the
// broker records a recognisable error type for Go, as it records ValueError for Python.
type FatalByDesignError struct{ JobID int64 }

func (e *FatalByDesignError) Error() string {
	return fmt.Sprintf("job %d is fatal by design", e.JobID)
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log); err != nil {
		log.Error("conformance worker failed", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	id := os.Getenv("JOBWIRE_WORKER_ID")
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	capacity, err := strconv.Atoi(envOr("JOBWIRE_CAPACITY", "8"))
	if err != nil {
		return fmt.Errorf("JOBWIRE_CAPACITY: %w", err)
	}
	graceSeconds, err := strconv.ParseFloat(envOr("JOBWIRE_GRACE_SECONDS", "30"), 64)
	if err != nil {
		return fmt.Errorf("JOBWIRE_GRACE_SECONDS: %w", err)
	}
	var queues []string
	for q := range strings.SplitSeq(os.Getenv("JOBWIRE_QUEUES"), ",") {
		if q != "" {
			queues = append(queues, q)
		}
	}
	dir := os.Getenv("JOBWIRE_CONFORMANCE_DIR")
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jobwire-conformance-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	c, err := client.DialEnv(context.Background())
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{
		ID:            id,
		Queues:        queues,
		Concurrency:   capacity,
		ShutdownGrace: time.Duration(graceSeconds * float64(time.Second)),
		Logger:        log,
	})
	if err != nil {
		return err
	}
	h := &handlers{dir: dir, log: log}
	h.register(w)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("conformance worker started", "state_dir", dir, "addr", client.SettingsFromEnv(nil).Addr)
	return w.Run(ctx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// handlers holds what the job types share: the marker directory and the flaky counters' lock.
type handlers struct {
	dir   string
	log   *slog.Logger
	flaky sync.Mutex
}

func (h *handlers) register(w *worker.Worker) {
	w.Handle("echo", h.echo)
	w.Handle("fatal", func(_ context.Context, j *worker.Job) error {
		return worker.Fatal(&FatalByDesignError{JobID: j.ID})
	})
	worker.HandleJSON(w, "flaky", h.flakyJob)
	w.Handle("always_transient", func(_ context.Context, j *worker.Job) error {
		return fmt.Errorf("job %d fails transiently by design", j.ID)
	})
	worker.HandleJSON(w, "retry_after", func(_ context.Context, _ *worker.Job, p struct {
		Seconds float64 `json:"seconds"`
	}) error {
		return worker.RetryAfter(errors.New("asked to retry later"), time.Duration(p.Seconds*float64(time.Second)))
	})
	worker.HandleJSON(w, "slow", func(ctx context.Context, _ *worker.Job, p struct {
		MS int `json:"ms"`
	}) error {
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	w.Handle("wait_cancel", func(ctx context.Context, j *worker.Job) error {
		<-ctx.Done()
		reason := cancelReason(context.Cause(ctx))
		h.log.Info("job cancelled", "job_id", j.ID, "reason", reason)
		return h.writeMarker(fmt.Sprintf("cancelled-%d", j.ID), []byte(reason))
	})
	worker.HandleJSON(w, "result", resultJob)
	worker.HandleJSON(w, "block", func(ctx context.Context, j *worker.Job, p struct {
		Marker string `json:"marker"`
	}) error {
		if err := h.writeMarker("started-"+p.Marker, []byte(strconv.FormatInt(j.ID, 10))); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
}

// echo checks that the payload is JSON and writes the bytes it received, so the suite can compare
// them with what it enqueued.
func (h *handlers) echo(_ context.Context, j *worker.Job) error {
	if len(j.Payload) > 0 && !json.Valid(j.Payload) {
		return worker.Fatal(errors.New("echo: payload is not valid JSON"))
	}
	return h.writeMarker(fmt.Sprintf("echo-%d", j.ID), j.Payload)
}

type flakyArgs struct {
	Key       string `json:"key"`
	FailTimes int    `json:"fail_times"`
}

func (h *handlers) flakyJob(_ context.Context, _ *worker.Job, p flakyArgs) error {
	h.flaky.Lock()
	defer h.flaky.Unlock()
	name := "flaky-" + p.Key
	failures := 0
	data, err := os.ReadFile(filepath.Join(h.dir, safeName(name)))
	switch {
	case err == nil:
		if s := strings.TrimSpace(string(data)); s != "" {
			if failures, err = strconv.Atoi(s); err != nil {
				return worker.Fatal(fmt.Errorf("flaky counter %s: %w", name, err))
			}
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if failures < p.FailTimes {
		if err := h.writeMarker(name, []byte(strconv.Itoa(failures+1))); err != nil {
			return err
		}
		return fmt.Errorf("flaky failure %d of %d for key %q", failures+1, p.FailTimes, p.Key)
	}
	return nil
}

// cancelReason names a cancellation cause the way the other languages' workers do.
func cancelReason(cause error) string {
	switch {
	case errors.Is(cause, worker.ErrJobCancelled):
		return "requested"
	case errors.Is(cause, worker.ErrAttemptTimeout):
		return "timeout"
	case errors.Is(cause, worker.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(cause, worker.ErrShutdown):
		return "shutdown"
	}
	return fmt.Sprint(cause)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// safeName keeps marker file names inside the state directory whatever the payload says.
func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// writeMarker replaces <dir>/<name> atomically, so the suite never reads half a file.
func (h *handlers) writeMarker(name string, data []byte) error {
	path := filepath.Join(h.dir, safeName(name))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// resultJob reports its steps as progress and returns its payload, or result_bytes bytes, as its
// result.
func resultJob(_ context.Context, j *worker.Job, p struct {
	Steps       int `json:"steps"`
	ResultBytes int `json:"result_bytes"`
}) error {
	for k := 1; k <= p.Steps; k++ {
		if err := j.SetProgress(float64(k)/float64(p.Steps), fmt.Sprintf("step %d of %d", k, p.Steps)); err != nil {
			return worker.Fatal(err)
		}
	}
	if p.ResultBytes > 0 {
		j.SetResult([]byte(strings.Repeat("x", p.ResultBytes)))
		return nil
	}
	j.SetResult(j.Payload)
	return nil
}
