//go:build unix

package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/worker"
)

// waitBenchJobs is how many jobs each round of BenchmarkWaitOn10kJobs runs.
const waitBenchJobs = 10_000

// BenchmarkWaitOn10kJobs drains 10,000 jobs through a Go worker with nobody waiting, and the
// same with a producer waiting on all of them (client.WaitAll over one WatchJobs call): the
// waiter costs the broker one row counting the 10,000 jobs and naming the final ones as the
// wait starts (store.VersionReader.FinalAmong), the hand-over of each job's final state as its
// result's write stored it (no read: see broker.JobWatch.Changed), the sending of how each
// ended (its outcome, not the whole job), and the same one-row read of the jobs still watched
// every WatchPoll (the backstop; the broker's clock follows the wall clock here, so it runs as
// in production). The broker collects garbage at jobwire serve's GOGC. The worker is a process
// of its own each round; the waiter is one process for all rounds, as a producer is, which
// dials the broker with client.Dial (this test binary run again), so that the CPU the broker's
// process spends is measured apart from theirs:
//
//	jobs/s          the drain's rate, from the resume of the queue to the last job read by
//	                the waiter (or the last success stored)
//	broker-µs/job   CPU, user and system, of the broker's process over the drain, per job
//	worker-µs/job   CPU of the worker's process over its life, per job
//	waiter-µs/job   CPU of the waiter's process from its dial to its last job, per job
//
// Run it interleaved, many rounds, and compare broker-µs/job first: rates on two shared cores
// move with whatever else runs far more than CPU per job does, and a round's difference by
// several µs a job. The third sub-benchmark, paired, runs the two side by side instead: each
// round a drain without the waiter and one with it, back to back (which goes first alternates),
// so that both meet the machine in the same state, and reports the ratio of their rates
// (rate-ratio: with / without, the time of all drains without over that of all with) and the
// broker's extra CPU per job (broker-µs/job-more). JOBWIRE_WAIT_BENCH_PROFILE (below) adds the
// worker's and the waiter's CPU profiles to the broker's.
//
//	go test ./server -run '^$' -bench WaitOn10kJobs -benchtime 3x -count 3
//	go test ./server -run '^$' -bench WaitOn10kJobs/paired -benchtime 40x
//
// docs/workflows.md ("Waiting and watching") gives the measured cost.
func BenchmarkWaitOn10kJobs(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(app.GCPercent)) // as jobwire serve collects
	for _, waiting := range []bool{false, true} {
		b.Run(fmt.Sprintf("waiting=%t", waiting), func(b *testing.B) {
			var total drain
			var waiter *benchWaiter
			if waiting {
				waiter = startBenchWaiter(b)
			}
			for range b.N {
				total.add(drainOnce(b, waiter))
			}
			jobs := float64(waitBenchJobs * b.N)
			b.ReportMetric(jobs/total.took.Seconds(), "jobs/s")
			b.ReportMetric(float64(total.broker.Microseconds())/jobs, "broker-µs/job")
			b.ReportMetric(float64(total.worker.Microseconds())/jobs, "worker-µs/job")
			if waiting {
				b.ReportMetric(float64(total.waiter.Microseconds())/jobs, "waiter-µs/job")
			}
			b.ReportMetric(0, "ns/op") // a round's time is in jobs/s
		})
	}
	b.Run("paired", func(b *testing.B) {
		waiter := startBenchWaiter(b)
		var without, with drain
		for i := range b.N {
			if i%2 == 0 {
				without.add(drainOnce(b, nil))
				with.add(drainOnce(b, waiter))
			} else {
				with.add(drainOnce(b, waiter))
				without.add(drainOnce(b, nil))
			}
		}
		jobs := float64(waitBenchJobs * b.N)
		b.ReportMetric(jobs/without.took.Seconds(), "jobs/s-without")
		b.ReportMetric(jobs/with.took.Seconds(), "jobs/s-with")
		b.ReportMetric(without.took.Seconds()/with.took.Seconds(), "rate-ratio")
		b.ReportMetric(float64((with.broker-without.broker).Nanoseconds())/1e3/jobs, "broker-µs/job-more")
		b.ReportMetric(float64(with.waiter.Microseconds())/jobs, "waiter-µs/job")
		b.ReportMetric(0, "ns/op")
	})
}

// drain is what one round took: its wall time and the CPU of each process.
type drain struct{ took, broker, worker, waiter time.Duration }

func (d *drain) add(o drain) {
	d.took += o.took
	d.broker += o.broker
	d.worker += o.worker
	d.waiter += o.waiter
}

// drainOnce enqueues the jobs into a paused queue, starts a worker (and has the waiter wait on
// the jobs, if there is one), resumes the queue and returns how long the jobs took to succeed
// (and to be read by the waiter).
func drainOnce(b *testing.B, waiter *benchWaiter) drain {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	done := &successes{all: make(chan struct{})}
	done.left.Store(waitBenchJobs)
	bb := brokertest.New(b, brokertest.Options{Commit: brokertest.GroupCommit(), Quiet: true, Observer: done})
	defer bb.Stop()
	if _, err := bb.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "bench"}); err != nil {
		b.Fatal(err)
	}
	var ids []int64
	for len(ids) < waitBenchJobs {
		specs := make([]*jobwirev1.JobSpec, 1000)
		for i := range specs {
			specs[i] = &jobwirev1.JobSpec{Type: "t", Queue: "bench"}
		}
		res, err := bb.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: specs})
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range res.GetJobs() {
			ids = append(ids, j.GetId())
		}
	}
	w := startBenchChild(b, bb.Addr, "worker")
	bb.WaitStreams(1)
	if waiter != nil {
		waiter.start(b, bb.Addr, ids)
		brokertest.WaitFor(b, "the waiter", func() bool { return bb.Broker.Watched() == waitBenchJobs })
	}
	cpu := processCPU(b)
	start := time.Now()
	stopClock := followWallClock(bb)
	if _, err := bb.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "bench"}); err != nil {
		b.Fatal(err)
	}
	<-done.all
	var d drain
	if waiter != nil {
		d.waiter = waiter.done(b)
	}
	stopClock()
	d.took, d.broker = time.Since(start), processCPU(b)-cpu
	d.worker = w.stop(b)
	return d
}

// followWallClock moves the broker's fake clock as the wall clock moves, until the returned
// stop is called, so that what the broker does on its clock runs as it would in production:
// the watch's backstop (a read of the versions of every job still watched, every WatchPoll),
// the sweeps.
func followWallClock(bb *brokertest.Bundle) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				bb.Clock.Advance(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(quit); <-done }
}

// successes counts the attempts that succeed (broker.Observer) and closes all at the last.
type successes struct {
	left atomic.Int64
	all  chan struct{}
}

func (s *successes) AttemptEnded(_, _ string, end broker.AttemptEnd) {
	if end.Cause == broker.CauseNone && s.left.Add(-1) == 0 {
		close(s.all)
	}
}

func (*successes) JobEnqueued(string, string)                                             {}
func (*successes) AttemptStarted(string, string, time.Duration)                           {}
func (*successes) JobCancelled(string, string)                                            {}
func (*successes) LeaseExpired(string)                                                    {}
func (*successes) BreakerTransition(string, breaker.State, breaker.State, breaker.Reason) {}
func (*successes) BatchCommitted(int, time.Duration, error)                               {}

// processCPU is the CPU time, user and system, this process has used so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRoleEnv names the part this test binary plays when BenchmarkWaitOn10kJobs runs it
// again: "worker" or "waiter", for the broker at benchAddrEnv.
const (
	benchRoleEnv = "JOBWIRE_WAIT_BENCH_ROLE"
	benchAddrEnv = "JOBWIRE_WAIT_BENCH_ADDR"
)

// benchProfileEnv, when set to a directory, has each worker and waiter process write a CPU
// profile there (ROLE-N.prof, N counting the processes of the role), to be read with the
// broker's own (-cpuprofile):
//
//	JOBWIRE_WAIT_BENCH_PROFILE=$PWD/prof go test ./server -run '^$' -bench WaitOn10kJobs/waiting=true -cpuprofile prof/broker.prof
//	go tool pprof -top prof/waiter-*.prof
const benchProfileEnv = "JOBWIRE_WAIT_BENCH_PROFILE"

// benchChildren counts the processes started per role, to name their profiles.
var benchChildren = map[string]int{}

// benchChild is a worker or waiter process of the benchmark.
type benchChild struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies *bufio.Reader // a waiter's standard output
	role    string
	out     *bytes.Buffer // what it printed, shown when it fails
}

// startBenchChild runs this test binary again as role for the broker at addr (a worker), or
// for the brokers its standard input names (a waiter).
func startBenchChild(b *testing.B, addr, role string) *benchChild {
	args := []string{"-test.run=^TestWaitBenchChild$", "-test.bench=^$"}
	if dir := os.Getenv(benchProfileEnv); dir != "" {
		benchChildren[role]++
		args = append(args, "-test.cpuprofile="+filepath.Join(dir, fmt.Sprintf("%s-%d.prof", role, benchChildren[role])))
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), benchRoleEnv+"="+role, benchAddrEnv+"="+addr)
	out := new(bytes.Buffer)
	cmd.Stderr = out
	c := &benchChild{cmd: cmd, role: role, out: out}
	if role == "waiter" {
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		c.replies = bufio.NewReader(stdout)
	} else {
		cmd.Stdout = out
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	c.stdin = stdin
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return c
}

// benchWaiter is a producer's process that waits on each round's jobs in turn, as a
// long-lived producer would: its start is not counted, and its heap is warm after the first
// round.
type benchWaiter struct{ *benchChild }

func startBenchWaiter(b *testing.B) *benchWaiter {
	w := &benchWaiter{startBenchChild(b, "", "waiter")}
	b.Cleanup(func() { w.stop(b) }) // lets it end, and write its profile
	return w
}

// start has the waiter wait on ids, a round's jobs, at the broker at addr: a line of the
// address and the ids.
func (w *benchWaiter) start(b *testing.B, addr string, ids []int64) {
	buf := bufio.NewWriter(w.stdin)
	fmt.Fprint(buf, addr)
	for _, id := range ids {
		fmt.Fprint(buf, " ", id)
	}
	fmt.Fprintln(buf)
	if err := buf.Flush(); err != nil {
		b.Fatal(err)
	}
}

// done waits for the waiter to say that every job of the round was final, and returns the CPU
// its wait used (from its dial of the broker to its last job).
func (w *benchWaiter) done(b *testing.B) time.Duration {
	line, err := w.replies.ReadString('\n')
	if err != nil {
		b.Fatalf("the waiter: %v\n%s", err, w.out)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		b.Fatalf("the waiter said %q: %v\n%s", line, err, w.out)
	}
	return time.Duration(ns)
}

// wait waits for the process to end and returns the CPU it used.
func (c *benchChild) wait(b *testing.B) time.Duration {
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("the %s: %v\n%s", c.role, err, c.out)
	}
	return c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
}

// stop tells a worker to stop (by closing its standard input) and returns the CPU it used.
func (c *benchChild) stop(b *testing.B) time.Duration {
	_ = c.stdin.Close()
	return c.wait(b)
}

// TestWaitBenchChild is a worker or a waiter of BenchmarkWaitOn10kJobs when the benchmark runs
// this binary again; it does nothing otherwise.
func TestWaitBenchChild(t *testing.T) {
	switch role := os.Getenv(benchRoleEnv); role {
	case "":
		t.Skip("run by BenchmarkWaitOn10kJobs")
	case "worker":
		benchWork(t, os.Getenv(benchAddrEnv))
	case "waiter":
		lines := bufio.NewScanner(os.Stdin)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			fmt.Println(benchWait(t, strings.Fields(lines.Text())).Nanoseconds())
		}
	default:
		t.Fatalf("%s is %q: worker or waiter", benchRoleEnv, role)
	}
}

func benchDial(t *testing.T, addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// benchWork runs a worker of 64 slots until its standard input is closed.
func benchWork(t *testing.T, addr string) {
	conn := benchDial(t, addr)
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := worker.New(conn, worker.Options{ID: "bench", Concurrency: 64, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", func(context.Context, *worker.Job) error { return nil })
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
		cancel()
	}()
	if err := w.Run(ctx); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// benchWait waits on the jobs of a round (the broker's address, then the ids) and returns the
// CPU this process used for it.
func benchWait(t *testing.T, round []string) time.Duration {
	ids := make([]int64, 0, len(round)-1)
	for _, f := range round[1:] {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cpu := processCPU(t)
	c, err := client.Dial(context.Background(), round[0]) // the SDK's connection, as a producer's
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	jobs, err := c.WaitAll(context.Background(), ids...)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.State != job.StateSucceeded {
			t.Fatalf("job %d is %s", j.ID, j.State)
		}
	}
	return processCPU(t) - cpu
}
