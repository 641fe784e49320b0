package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/metrics"
	"github.com/jobwire/jobwire/worker"
)

// These tests run the SDK against a real broker on a loopback port.

func runWorker(t *testing.T, b *brokertest.Bundle, register func(w *worker.Worker)) (stop func() error) {
	t.Helper()
	return runWorkerWith(t, b, worker.Options{ID: "sdk-" + t.Name(), Concurrency: 4, ShutdownGrace: 5 * time.Second}, register)
}

func runWorkerWith(t *testing.T, b *brokertest.Bundle, opts worker.Options, register func(w *worker.Worker)) (stop func() error) {
	t.Helper()
	w, err := worker.New(b.Conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(brokertest.WaitTimeout):
			return errors.New("worker did not stop")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func enqueue(t *testing.T, b *brokertest.Bundle, typ string, payload string) int64 {
	t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: typ, Payload: []byte(payload)}})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetJob().GetId()
}

func waitJob(t *testing.T, b *brokertest.Bundle, id int64, want jobwirev1.JobState) *jobwirev1.Job {
	t.Helper()
	return waitJobWhere(t, b, id, want, func(*jobwirev1.Job) bool { return true })
}

// waitJobWhere polls the job until it is in state want and ok accepts it.
func waitJobWhere(t *testing.T, b *brokertest.Bundle, id int64, want jobwirev1.JobState, ok func(*jobwirev1.Job) bool) *jobwirev1.Job {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetJob().GetState() == want && ok(res.GetJob()) {
			return res.GetJob()
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s, want %s", id, res.GetJob().GetState(), want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type emailArgs struct {
	To string `json:"to"`
}

func TestSDKTriageAgainstBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	var flaky atomic.Int32
	got := make(chan string, 1)
	runWorker(t, b, func(w *worker.Worker) {
		worker.HandleJSON(w, "email", func(_ context.Context, _ *worker.Job, a emailArgs) error {
			got <- a.To
			return nil
		})
		w.Handle("bug", func(context.Context, *worker.Job) error {
			var m map[string]int
			m["boom"]++ // a nil map write panics: a code bug
			return nil
		})
		w.Handle("unsupported", func(context.Context, *worker.Job) error {
			return fmt.Errorf("format v2: %w", errors.ErrUnsupported)
		})
		w.Handle("declined", func(context.Context, *worker.Job) error {
			return worker.Fatal(errors.New("card declined"))
		})
		w.Handle("flaky", func(context.Context, *worker.Job) error {
			if flaky.Add(1) <= 2 {
				return worker.RetryAfter(errors.New("rate limited"), time.Second)
			}
			return nil
		})
	})

	id := enqueue(t, b, "email", `{"to":"zoë@example.com"}`)
	if to := <-got; to != "zoë@example.com" {
		t.Fatalf("payload decoded to %q", to)
	}
	waitJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)

	badJSON := enqueue(t, b, "email", `{"to": 42}`)
	for _, tc := range []struct {
		id        int64
		errorType string
	}{
		{badJSON, "*json.UnmarshalTypeError"},
		{enqueue(t, b, "bug", ""), "panic"},
		{enqueue(t, b, "unsupported", ""), "errors.ErrUnsupported"},
		{enqueue(t, b, "declined", ""), "error"},
	} {
		j := waitJob(t, b, tc.id, jobwirev1.JobState_JOB_STATE_DEAD)
		h := j.GetAttemptHistory()
		if j.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_FATAL || len(h) != 1 || h[0].GetErrorType() != tc.errorType {
			t.Errorf("job %d: reason %s, history %v; want FATAL after one attempt with %s", tc.id, j.GetDeadReason(), h, tc.errorType)
		}
	}

	fid := enqueue(t, b, "flaky", "")
	for want := int32(1); want <= 2; want++ {
		j := waitJobWhere(t, b, fid, jobwirev1.JobState_JOB_STATE_SCHEDULED, func(j *jobwirev1.Job) bool { return j.GetAttempts() == want })
		if j.GetRunAt().AsTime().Sub(j.GetAttemptHistory()[want-1].GetFinishedAt().AsTime()) != time.Second {
			t.Fatalf("after attempt %d: %v (retry-after 1s not honoured)", want, j)
		}
		b.Clock.Advance(time.Second)
	}
	if j := waitJob(t, b, fid, jobwirev1.JobState_JOB_STATE_SUCCEEDED); j.GetAttempts() != 3 {
		t.Fatalf("flaky job took %d attempts, want 3", j.GetAttempts())
	}
}

func TestSDKHandlerSeesBrokerCancel(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	started := make(chan struct{})
	cause := make(chan error, 1)
	runWorker(t, b, func(w *worker.Worker) {
		w.Handle("long", func(ctx context.Context, _ *worker.Job) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
	})
	id := enqueue(t, b, "long", "")
	<-started
	waitJob(t, b, id, jobwirev1.JobState_JOB_STATE_RUNNING)
	if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, worker.ErrJobCancelled) {
			t.Fatalf("cause = %v, want ErrJobCancelled", err)
		}
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("handler never saw the cancel")
	}
	if j := waitJob(t, b, id, jobwirev1.JobState_JOB_STATE_CANCELLED); j.GetAttempts() != 1 {
		t.Fatalf("job = %v", j)
	}
}

// On shutdown the running job finishes within the grace period and its result is stored
// before Run returns.
func TestSDKGracefulShutdown(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	release := make(chan struct{})
	started := make(chan int64, 1)
	stop := runWorker(t, b, func(w *worker.Worker) {
		w.Handle("slow", func(_ context.Context, j *worker.Job) error {
			started <- j.ID
			<-release
			return nil
		})
	})
	first := enqueue(t, b, "slow", "")
	if got := <-started; got != first {
		t.Fatalf("started %d", got)
	}
	waitJob(t, b, first, jobwirev1.JobState_JOB_STATE_RUNNING)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if j := getJob(t, b, first); j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("after Run returned the job is %s, want SUCCEEDED", j.GetState())
	}
}

func getJob(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Job {
	t.Helper()
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetJob()
}

// Jobs near the payload limit, leased together, and results near the result limit, finished
// together, reach the worker and the broker: no frame packs more than either end reads (gRPC's
// default, 4 MiB), however many such messages are ready at once.
func TestLargeJobsReadyTogether(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	const n = 8
	big := strings.Repeat("x", 900<<10)
	var ids []int64
	for range n {
		ids = append(ids, enqueue(t, b, "big", big))
	}
	release := make(chan struct{})
	var entered atomic.Int32
	runWorkerWith(t, b, worker.Options{ID: "big", Concurrency: n, ShutdownGrace: 5 * time.Second}, func(w *worker.Worker) {
		w.Handle("big", func(ctx context.Context, j *worker.Job) error {
			if len(j.Payload) != len(big) {
				return fmt.Errorf("payload of %d bytes, want %d", len(j.Payload), len(big))
			}
			// Every handler returns at once, once all have started, so the results are
			// ready together.
			if entered.Add(1) == n {
				close(release)
			}
			<-release
			j.SetResult([]byte(big))
			return nil
		})
	})
	for _, id := range ids {
		waitJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	}
}

// A job whose parents' results come to more than a worker reads in one message (4 MiB) is
// never sent: it goes to the dead-letter queue as AssignmentTooLarge, with its size in the
// error and no attempt counted (none started: the metrics count a dead job, and no start or
// failure), and the worker's stream goes on: a job with fewer such parents runs, and reads them.
// Sent, the assignment ended the stream with RESOURCE_EXHAUSTED and its job stayed leased,
// to be handed out again, forever.
func TestAssignmentTooLargeIsDeadLettered(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	b := brokertest.New(t, brokertest.Options{Observer: m})
	big := strings.Repeat("r", 900<<10)
	var parents []int64
	for range 5 {
		parents = append(parents, enqueue(t, b, "parent", ""))
	}
	child := func(parents []int64) int64 {
		res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{
			Job: &jobwirev1.JobSpec{Type: "child", DependsOn: parents}})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetJob().GetId()
	}
	tooMany, fits := child(parents), child(parents[:3])
	var read atomic.Int32
	runWorkerWith(t, b, worker.Options{ID: "parents", Concurrency: 4}, func(w *worker.Worker) {
		w.Handle("parent", func(ctx context.Context, j *worker.Job) error {
			j.SetResult([]byte(big))
			return nil
		})
		w.Handle("child", func(ctx context.Context, j *worker.Job) error {
			if j.ID == tooMany {
				return errors.New("the job whose parents' results are too large to send was sent")
			}
			for _, p := range j.ParentResults {
				if len(p.Result) != len(big) {
					return fmt.Errorf("parent %d's result is %d bytes, want %d", p.JobID, len(p.Result), len(big))
				}
			}
			read.Store(int32(len(j.ParentResults)))
			return nil
		})
	})
	dead := waitJob(t, b, tooMany, jobwirev1.JobState_JOB_STATE_DEAD)
	if dead.GetLastErrorType() != broker.AssignmentTooLarge || !strings.Contains(dead.GetLastErrorMessage(), "a worker reads at most 4194304") ||
		dead.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_FATAL || dead.GetAttempts() != 0 {
		t.Errorf("dead as %s, %s: %q after %d attempts; want FATAL %s with the limit, after none", dead.GetDeadReason(),
			dead.GetLastErrorType(), dead.GetLastErrorMessage(), dead.GetAttempts(), broker.AssignmentTooLarge)
	}
	waitJob(t, b, fits, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	if n := read.Load(); n != 3 {
		t.Errorf("the job that fits read %d parents' results, want 3", n)
	}
	// Of the children, the one that fits started and succeeded; the other is dead, unstarted.
	for name, want := range map[string]float64{"jobwire_jobs_started_total": 1, "jobwire_jobs_succeeded_total": 1,
		"jobwire_jobs_dead_total": 1, "jobwire_jobs_failed_total": 0, "jobwire_attempt_duration_seconds": 1} {
		if got := childCount(t, m, name); got != want {
			t.Errorf("%s of the children: %v, want %v", name, got, want)
		}
	}
}

// childCount sums the samples of the metric name over the series of job type "child" (a
// histogram: its count).
func childCount(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "job_type" && l.GetValue() == "child" {
					sum += s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return sum
}
