package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/worker"
)

// workerCommand is the hidden subcommand that runs one worker process.
const workerCommand = "worker"

// jobType is the job type every scenario enqueues and every worker serves.
const jobType = "noop"

// The worker process talks to the benchmark over its standard streams, one line a message:
//
//	ready                  the broker welcomed the worker's stream
//	acked <n> <unixnano>   n results acknowledged as SUCCEEDED so far, the last at unixnano
//	latency <json array>   enqueue-to-start samples in nanoseconds (after stdin closes)
//	bye                    the worker stopped after every result was acknowledged
//
// Closing its standard input stops it gracefully.
const (
	msgReady   = "ready"
	msgAcked   = "acked"
	msgLatency = "latency"
	msgBye     = "bye"
)

// Payloads are payloadSize bytes: the Unix nanosecond time taken just before the job was
// enqueued, then a byte that is 1 when the job's enqueue-to-start latency counts (0 during the
// warm-up and in throughput scenarios).
const payloadSize = 9

func makePayload(at time.Time, measure bool) []byte {
	p := make([]byte, payloadSize)
	binary.BigEndian.PutUint64(p, uint64(at.UnixNano()))
	if measure {
		p[8] = 1
	}
	return p
}

// ackCounter watches the messages a worker receives: the broker's Welcome and every ResultAck.
// Counting acknowledgements, not handler returns, means a job counts once its SUCCEEDED state
// is committed.
type ackCounter struct {
	acked   atomic.Int64
	lastAck atomic.Int64 // Unix nanoseconds
	welcome chan struct{}
	once    sync.Once
}

func (a *ackCounter) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countingStream{ClientStream: s, a: a}, nil
}

type countingStream struct {
	grpc.ClientStream
	a *ackCounter
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*jobwirev1.ConnectResponse); ok && err == nil {
		if b := r.GetBatch(); b != nil {
			for _, inner := range b.GetMessages() {
				s.count(inner)
			}
		} else {
			s.count(r)
		}
	}
	return err
}

func (s *countingStream) count(r *jobwirev1.ConnectResponse) {
	switch {
	case r.GetResultAck().GetDecision() == jobwirev1.Decision_DECISION_SUCCEEDED:
		s.a.lastAck.Store(time.Now().UnixNano())
		s.a.acked.Add(1)
	case r.GetWelcome() != nil:
		s.a.once.Do(func() { close(s.a.welcome) })
	}
}

// lineWriter serialises the worker's report lines.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
	_ = l.w.Flush()
}

// runWorker is the hidden worker subcommand: the Go worker SDK with a no-op handler.
func runWorker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(workerCommand, flag.ContinueOnError)
	addr := fs.String("addr", "", "broker address")
	id := fs.String("id", "bench-worker", "worker id")
	concurrency := fs.Int("concurrency", 256, "handler slots")
	latency := fs.Bool("latency", false, "record enqueue-to-start latency")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	queue := fs.String("queue", "", "take jobs of this queue only (default: every queue)")
	types := fs.Int("types", 1, "handle this many types: the scenarios' own and the rest with no job")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var queues []string
	if *queue != "" {
		queues = []string{*queue}
	}
	if *addr == "" {
		return errors.New("worker: --addr is required")
	}
	if *profile != "" {
		stop, err := startProfiles(*profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	out := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	counter := &ackCounter{welcome: make(chan struct{})}
	// Dialled as the SDK dials, with its defaults, as a user's worker would be.
	c, err := client.Dial(context.Background(), *addr,
		client.WithDialOptions(grpc.WithChainStreamInterceptor(counter.interceptor)))
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(c.Conn(), worker.Options{
		ID:            *id,
		Concurrency:   *concurrency,
		Queues:        queues,
		ShutdownGrace: 10 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	var (
		samplesMu sync.Mutex
		samples   []int64
	)
	w.Handle(jobType, func(_ context.Context, j *worker.Job) error {
		if !*latency || len(j.Payload) != payloadSize || j.Payload[8] != 1 {
			return nil
		}
		d := time.Now().UnixNano() - int64(binary.BigEndian.Uint64(j.Payload))
		samplesMu.Lock()
		samples = append(samples, d)
		samplesMu.Unlock()
		return nil
	})

	for i := 2; i <= *types; i++ {
		w.Handle(fmt.Sprintf("%s-%d", jobType, i), func(context.Context, *worker.Job) error { return nil })
	}

	// Stop when the benchmark closes our standard input (or dies), or on a signal.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	go func() {
		select {
		case <-counter.welcome:
			out.printf(msgReady)
		case <-runCtx.Done():
		}
	}()
	reportDone := make(chan struct{})
	reported := make(chan struct{})
	report := func() int64 {
		n := counter.acked.Load()
		out.printf("%s %d %d", msgAcked, n, counter.lastAck.Load())
		return n
	}
	go func() {
		// Report progress often enough for the benchmark to time a drain to a few milliseconds;
		// the timestamp of the last ack makes the end time exact anyway.
		defer close(reported)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-reportDone:
				return
			case <-tick.C:
				if counter.acked.Load() != last {
					last = report()
				}
			}
		}
	}()
	runErr := w.Run(runCtx)
	close(reportDone)
	<-reported
	report()
	samplesMu.Lock()
	data, err := json.Marshal(samples)
	samplesMu.Unlock()
	if err != nil {
		return err
	}
	out.printf("%s %s", msgLatency, data)
	out.printf(msgBye)
	return runErr
}
