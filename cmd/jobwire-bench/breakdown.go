package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/internal/percentile"
	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/worker"
)

// breakdownCommand times one enqueue, and one enqueue-to-start, stage by stage (package
// stages), with each optional interceptor of the broker on and off.
//
// Broker, producer and worker run in this one process (the broker through the same wiring as
// `jobwire serve`, on a fresh SQLite file, over gRPC on loopback), so that one clock stamps
// every stage. The producer sends one enqueue at a time and waits for everything it caused
// (with a worker: the job's start and its result's acknowledgement) before the next: what is
// measured is each stage's own cost, not queueing behind other work. With --rate the worker's
// phase is paced instead (see deliverEach), to see which stages make the tail at a rate.
const breakdownCommand = "breakdown"

// breakdownSetup is one set of the broker's optional interceptors.
type breakdownSetup struct {
	name    string
	auth    bool // a token on every call
	metrics bool // Prometheus metrics, with the gRPC server metrics interceptors
	tracing bool // OpenTelemetry spans exported over OTLP (to a port nobody listens on)
	callLog bool // the call log at debug, where it writes a line per call
}

var breakdownSetups = []breakdownSetup{
	{name: "bare"},
	{name: "auth", auth: true},
	{name: "metrics", metrics: true},
	{name: "tracing", tracing: true},
	{name: "calllog", callLog: true},
	{name: "all", auth: true, metrics: true, tracing: true, callLog: true},
}

// stage is the time between two points.
type stage struct {
	name     string
	from, to stages.Point
}

// enqueueStages cut one Enqueue round trip; deliveryStages the way from the enqueue's commit
// to the handler. Both end with their total.
var (
	enqueueStages = []stage{
		{"client library, out", stages.Call, stages.ClientSend},
		{"gRPC to the server, decoded", stages.ClientSend, stages.Decoded},
		{"interceptors", stages.Decoded, stages.Handler},
		{"handler to the writer's queue", stages.Handler, stages.Queued},
		{"writer's queue", stages.Queued, stages.Taken},
		{"batch planned", stages.Taken, stages.CommitStart},
		{"transaction and commit", stages.CommitStart, stages.CommitEnd},
		{"commit to answer", stages.CommitEnd, stages.Answered},
		{"reply", stages.Answered, stages.Replied},
		{"gRPC back to the client", stages.Replied, stages.ClientRecv},
		{"client library, in", stages.ClientRecv, stages.Return},
		{"Enqueue round trip", stages.Call, stages.Return},
	}
	deliveryStages = []stage{
		{"commit to lease handed out", stages.CommitEnd, stages.HandedOut},
		{"session to stream send", stages.HandedOut, stages.StreamSend},
		{"stream to worker library", stages.StreamSend, stages.WorkerRecv},
		{"worker library to handler", stages.WorkerRecv, stages.HandlerStart},
		{"enqueue to start", stages.Call, stages.HandlerStart},
	}
)

func runBreakdown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(breakdownCommand, flag.ContinueOnError)
	n := fs.Int("n", 2000, "enqueues timed per setup and phase")
	only := fs.String("setups", "", "comma-separated setups to run (default all: "+setupNames()+")")
	durability := fs.String("durability", "normal", "broker durability: normal or full")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (broker, producer and worker) to this file")
	rate := fs.Int("rate", 0, "pace the worker's phase at this many enqueues a second, as the latency scenario does, instead of one after another's result (0)")
	pg := fs.String("db", "", "run the broker on this PostgreSQL database (a postgres:// URL), each setup in a fresh schema, instead of a fresh SQLite file each")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: jobwire-bench %s [flags]\n\nTimes one Enqueue and one enqueue-to-start stage by stage, p50 and p99 in microseconds,\nwith each optional interceptor of the broker on and off (see docs/performance.md).\n\nFlags:\n", breakdownCommand)
		fs.PrintDefaults()
	}
	if err := parseCommandLine(fs, args); err != nil {
		return err
	}
	if *n < 10 {
		fmt.Fprintf(os.Stderr, "jobwire-bench %s: -n must be at least 10, got %d\n", breakdownCommand, *n)
		return errUsage
	}
	if *rate < 0 || *rate > 10_000 {
		fmt.Fprintf(os.Stderr, "jobwire-bench %s: --rate must be between 0 and 10000, got %d\n", breakdownCommand, *rate)
		return errUsage
	}
	if *durability != "normal" && *durability != "full" {
		fmt.Fprintf(os.Stderr, "jobwire-bench %s: --durability must be normal or full, got %q\n", breakdownCommand, *durability)
		return errUsage
	}
	setups := breakdownSetups
	if *only != "" {
		setups = nil
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(breakdownSetups, func(s breakdownSetup) bool { return s.name == strings.TrimSpace(name) })
			if i < 0 {
				fmt.Fprintf(os.Stderr, "jobwire-bench %s: unknown setup %q (have %s)\n", breakdownCommand, name, setupNames())
				return errUsage
			}
			setups = append(setups, breakdownSetups[i])
		}
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "jobwire-breakdown-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := machineInfo()
	storeName := "sqlite, durability " + *durability
	if *pg != "" {
		storeName = "postgres"
	}
	pace := "one at a time"
	if *rate > 0 {
		pace = fmt.Sprintf("the worker's phase paced at %d/s", *rate)
	}
	fmt.Printf("jobwire-bench %s: %s, %d CPUs, %s, load average %s; %s; %d enqueues per setup and phase, %s\n\n",
		breakdownCommand, env.CPU, env.CPUs, env.Go, env.LoadAvg, storeName, *n, pace)
	var enq, del [][]*stages.Trace
	for _, s := range setups {
		e, d, err := breakdownOn(ctx, s, &benchConfig{Postgres: *pg}, dir, *durability == "full", *n, *rate)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		enq, del = append(enq, e), append(del, d)
	}
	fmt.Println("One Enqueue, no worker connected (p50 / p99 us):")
	printStages(setups, enqueueStages, enq)
	if *rate > 0 {
		fmt.Printf("\nEnqueue to start at %d/s, one worker with room (p50 / p99 us):\n", *rate)
	} else {
		fmt.Println("\nEnqueue to start, one worker with room (p50 / p99 us):")
	}
	printStages(setups, append(enqueueStages[:8:8], deliveryStages...), del)
	return nil
}

func setupNames() string {
	names := make([]string, len(breakdownSetups))
	for i, s := range breakdownSetups {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// breakdownOn runs breakdownOne on a fresh database for setup s: a SQLite file in dir, or a
// schema of cfg's PostgreSQL database, dropped afterwards.
func breakdownOn(ctx context.Context, s breakdownSetup, cfg *benchConfig, dir string, full bool, n, rate int) (enq, del []*stages.Trace, err error) {
	db, drop, err := scenarioDB(ctx, cfg, dir, "breakdown-"+s.name)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if dropErr := drop(); dropErr != nil && err == nil {
			err = dropErr
		}
	}()
	return breakdownOne(ctx, s, dir, db, full, n, rate)
}

// breakdownOne runs a broker with setup s on the fresh database db, its files in dir, and times n enqueues
// without a worker, then n enqueues each run by a worker before the next (or paced at rate).
func breakdownOne(ctx context.Context, s breakdownSetup, dir, db string, full bool, n, rate int) (enq, del []*stages.Trace, err error) {
	const token = "breakdown-admin-token-0123456789abcdef"
	cfg := config.Defaults()
	cfg.Listen, cfg.DB, cfg.FullSync = "127.0.0.1:0", db, full
	cfg.HTTPListen, cfg.Metrics = config.HTTPOff, s.metrics
	if s.metrics {
		cfg.HTTPListen = "127.0.0.1:0" // the metrics are collected as they are when served
	}
	if s.auth {
		cfg.Auth, cfg.BootstrapToken, cfg.BootstrapTokenFile = true, token, filepath.Join(dir, s.name+"-admin-token")
	}
	// Spans that cannot be exported are dropped, and said so on every export: not here.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	// The broker reads its trace export settings from the environment, as `jobwire serve` does.
	for k, v := range map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": ""} {
		if s.tracing {
			v = map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}[k]
		}
		if err := os.Setenv(k, v); err != nil {
			return nil, nil, err
		}
	}
	level := slog.LevelInfo
	if s.callLog {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan app.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, cfg, log, func(a app.Addrs) { ready <- a }) }()
	var addrs app.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		return nil, nil, fmt.Errorf("broker: %w", err)
	}
	defer func() {
		stop()
		if runErr := <-done; runErr != nil && err == nil && !errors.Is(runErr, context.Canceled) {
			err = fmt.Errorf("broker: %w", runErr)
		}
	}()
	// A call per job: its stages are what the client's interceptor marks (markUnary).
	opts := []client.DialOption{client.WithBlock(), client.WithEnqueueStreams(0),
		client.WithDialOptions(grpc.WithChainUnaryInterceptor(markUnary))}
	if s.auth {
		opts = append(opts, client.WithToken(token))
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.Dial(dialCtx, addrs.GRPC.String(), opts...)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()

	// The worker's phase first, so that its leases find no jobs of the other phase waiting.
	warm := n / 10
	if del, err = deliverEach(ctx, c, addrs.GRPC.String(), s, token, warm, n, rate); err != nil {
		return nil, nil, err
	}
	defer stages.End()
	for i := range warm + n {
		t := stages.Begin()
		stages.Mark(stages.Call)
		_, err := c.Enqueue(ctx, jobType, makePayload(time.Now(), false))
		stages.Mark(stages.Return)
		if err != nil {
			return nil, nil, err
		}
		if i >= warm {
			enq = append(enq, t)
		}
	}
	return enq, del, nil
}

// deliverEach connects a worker to the broker at addr and times c's n enqueues (after warm
// untimed ones), each until its handler started and its result was acknowledged; then the
// worker leaves.
//
// With rate above 0, enqueue i is sent at i/rate from the start instead (at once if late), and
// waited for until its handler started only: the result of one job is then written while the
// next is on its way, as under the latency scenario's producer. A trace whose writer's marks
// went to another write (a result queued after the trace began, before its enqueue) is left
// out, so at a rate the traces kept are slightly fewer than n.
func deliverEach(ctx context.Context, c *client.Client, addr string, s breakdownSetup, token string, warm, n, rate int) ([]*stages.Trace, error) {
	acks := &ackCounter{welcome: make(chan struct{})}
	wopts := []client.DialOption{client.WithDialOptions(grpc.WithChainStreamInterceptor(acks.interceptor, markStream))}
	if s.auth {
		wopts = append(wopts, client.WithToken(token))
	}
	wc, err := client.Dial(ctx, addr, wopts...)
	if err != nil {
		return nil, err
	}
	defer wc.Close()
	w, err := worker.New(wc.Conn(), worker.Options{ID: "breakdown", Concurrency: breakdownSlots,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	started := make(chan struct{}, 1)
	w.Handle(deliverType, func(context.Context, *worker.Job) error {
		stages.Mark(stages.HandlerStart)
		started <- struct{}{}
		return nil
	})
	wctx, stop := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { stop(); <-wdone }()
	select {
	case <-acks.welcome:
	case err := <-wdone:
		return nil, fmt.Errorf("worker: %w", err)
	case <-time.After(10 * time.Second):
		return nil, errors.New("worker: no welcome within 10s")
	}
	var out []*stages.Trace
	defer stages.End()
	start := time.Now()
	for i := range warm + n {
		if rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		}
		t := stages.Begin()
		stages.Mark(stages.Call)
		_, err := c.Enqueue(ctx, deliverType, makePayload(time.Now(), false))
		stages.Mark(stages.Return)
		if err != nil {
			return nil, err
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("job %d did not start within 10s", i)
		}
		if rate > 0 {
			if _, ok := t.Between(stages.Handler, stages.Queued); ok && i >= warm {
				out = append(out, t)
			}
			continue
		}
		// Its result's commit is part of what this job caused: wait for its acknowledgement.
		deadline := time.Now().Add(10 * time.Second)
		for acks.acked.Load() < int64(i+1) {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("job %d's result was not acknowledged within 10s", i)
			}
			time.Sleep(20 * time.Microsecond)
		}
		if i >= warm {
			out = append(out, t)
		}
	}
	return out, nil
}

// breakdownSlots are the delivery worker's handler slots, as many as a benchmark worker's
// (--concurrency). With one slot, at a rate each round that leased a job filled the worker, so
// the broker took it that more jobs might wait: the worker's results could not wait for the
// next enqueue's commit, and each enqueue queued behind the commit of the result before it
// (on PostgreSQL the writer's queue took 540-700 µs at the median, the hand-out 1.0-1.2 ms
// at p99), which the benchmark's workers never see.
const breakdownSlots = 256

// deliverType is the job type of the delivery phase, which only its worker takes.
const deliverType = "breakdown"

// markUnary marks the client library's hand-over to gRPC and gRPC's answer.
func markUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	stages.Mark(stages.ClientSend)
	err := invoker(ctx, method, req, reply, cc, opts...)
	stages.Mark(stages.ClientRecv)
	return err
}

// markStream marks the worker library's read of an assignment.
func markStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return markingStream{s}, nil
}

type markingStream struct{ grpc.ClientStream }

func (s markingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*jobwirev1.ConnectResponse); ok && err == nil && (r.GetAssignment() != nil || r.GetBatch() != nil) {
		// Only after the server's send of the traced job: the frame read before it may be the
		// acknowledgement of the job before, whose result waited for this job's enqueue.
		stages.MarkAfter(stages.StreamSend, stages.WorkerRecv)
	}
	return err
}

// printStages prints one row per stage, with each setup's p50 and p99 in microseconds.
func printStages(setups []breakdownSetup, rows []stage, traces [][]*stages.Trace) {
	fmt.Printf("%-32s", "STAGE")
	for _, s := range setups {
		fmt.Printf(" %15s", s.name)
	}
	fmt.Println()
	for _, st := range rows {
		fmt.Printf("%-32s", st.name)
		for i := range setups {
			var ds []time.Duration
			for _, t := range traces[i] {
				if d, ok := t.Between(st.from, st.to); ok {
					ds = append(ds, d)
				}
			}
			fmt.Printf(" %15s", p50p99(ds))
		}
		fmt.Println()
	}
}

// p50p99 formats the median and 99th percentile of ds in microseconds.
func p50p99(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f", micros(d)) }
	return us(percentile.NearestRank(ds, 50)) + " / " + us(percentile.NearestRank(ds, 99))
}
