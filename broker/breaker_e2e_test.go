package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/worker"
)

// These tests run a real broker and the Go worker SDK through a dependency outage: 200 jobs
// of one type whose handler fails while a flag is down.

const (
	outageJobs        = 200
	outageConcurrency = 10
	// outageSteps clock moves of breaker.DefaultOpenFor each make a five-minute outage, long
	// enough for every job to use up the default 4 attempts if nothing holds them back.
	outageSteps = 10
	step        = breaker.DefaultOpenFor
	flakyType   = "charge"
	healthyType = "email"
)

var errDependencyDown = errors.New("payment gateway unavailable")

// outage is what one run through the outage did.
type outage struct {
	outageCalls int64 // handler calls while the dependency was down
	totalCalls  int64 // handler calls in all
	succeeded   int
	dead        int
}

// snapshot counts the jobs of typ by state, read straight from storage in one query, and
// counts as due the SCHEDULED ones whose time has come: a clock move promotes those on a
// goroutine of its own, so they are about to become PENDING.
func snapshot(t *testing.T, b *brokertest.Bundle, typ string) (n map[job.State]int, due int) {
	t.Helper()
	jobs, err := b.Store.JobList(context.Background(), &store.JobListParams{Type: typ, Limit: 10 * outageJobs})
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	n = map[job.State]int{}
	now := b.Clock.Now()
	for _, j := range jobs {
		n[j.State]++
		if j.State == job.StateScheduled && !j.RunAt.After(now) {
			due++
		}
	}
	return n, due
}

func breakerState(t *testing.T, b *brokertest.Bundle, typ string) jobwirev1.BreakerState {
	t.Helper()
	res, err := b.Admin.ListBreakers(context.Background(), &jobwirev1.ListBreakersRequest{})
	if err != nil {
		t.Fatalf("list breakers: %v", err)
	}
	for _, br := range res.GetBreakers() {
		if br.GetType() == typ {
			return br.GetState()
		}
	}
	return jobwirev1.BreakerState_BREAKER_STATE_CLOSED
}

// settle waits until the broker can do nothing more for typ at the current time: no job is
// leased or running, none is due but not yet pending, and none is pending unless the type's
// breaker holds it back. It fails only when the jobs stop moving for brokertest.WaitTimeout
// without settling: under the race detector on a busy machine the broker can be slow, but
// it is never idle with work to do.
func settle(t *testing.T, b *brokertest.Bundle, typ string) map[job.State]int {
	t.Helper()
	var last map[job.State]int
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		n, due := snapshot(t, b, typ)
		if n[job.StateLeased]+n[job.StateRunning]+due == 0 &&
			(n[job.StatePending] == 0 || breakerState(t, b, typ) == jobwirev1.BreakerState_BREAKER_STATE_OPEN) {
			return n
		}
		if !maps.Equal(n, last) {
			last, deadline = n, time.Now().Add(brokertest.WaitTimeout)
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker stopped short of settling: %v (%d due), breaker %s", n, due, breakerState(t, b, typ))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runOutage enqueues outageJobs jobs whose handler fails while the dependency is down, keeps it
// down for outageSteps clock moves, brings it back and moves the clock until every job is
// finished. during runs once, after the first failures have settled, while the dependency is
// still down.
func runOutage(t *testing.T, bc breaker.Config, during func(b *brokertest.Bundle)) outage {
	t.Helper()
	b := brokertest.New(t, brokertest.Options{Breakers: &broker.BreakerOptions{Default: bc}})
	var calls atomic.Int64
	var up atomic.Bool
	w, err := worker.New(b.Conn, worker.Options{ID: "sdk", Concurrency: outageConcurrency, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(flakyType, func(ctx context.Context, j *worker.Job) error {
		calls.Add(1)
		if !up.Load() {
			return errDependencyDown // an ordinary error: a transient failure
		}
		return nil
	})
	w.Handle(healthyType, func(ctx context.Context, j *worker.Job) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(brokertest.WaitTimeout):
			t.Error("worker did not stop")
		}
	})

	specs := make([]*jobwirev1.JobSpec, outageJobs)
	for i := range specs {
		specs[i] = &jobwirev1.JobSpec{Type: flakyType}
	}
	if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}

	for i := range outageSteps {
		n := settle(t, b, flakyType)
		if i == 0 && during != nil {
			during(b)
		}
		if n[job.StateDead] > 0 && !bc.Disabled {
			t.Fatalf("%d jobs reached the DLQ during the outage: %v", n[job.StateDead], n)
		}
		b.Advance(step)
	}
	settle(t, b, flakyType)
	var out outage
	out.outageCalls = calls.Load()

	up.Store(true)
	for i := 0; ; i++ {
		n := settle(t, b, flakyType)
		if n[job.StateSucceeded]+n[job.StateDead] == outageJobs {
			out.succeeded, out.dead = n[job.StateSucceeded], n[job.StateDead]
			break
		}
		if i == 20 {
			t.Fatalf("jobs still unfinished after the dependency came back: %v", n)
		}
		b.Advance(step)
	}
	out.totalCalls = calls.Load()
	return out
}

func TestBreakerOutageWithRealWorker(t *testing.T) {
	t.Parallel()
	bc := breaker.CountConfig()
	maxAttempts := broker.DefaultConfig().Retry.MaxAttempts

	t.Run("breaker on", func(t *testing.T) {
		t.Parallel()
		got := runOutage(t, bc, func(b *brokertest.Bundle) {
			// While the flaky type is OPEN another type flows at full speed, with no clock move.
			if s := breakerState(t, b, flakyType); s != jobwirev1.BreakerState_BREAKER_STATE_OPEN {
				t.Fatalf("breaker of %s is %s after the first failures, want OPEN", flakyType, s)
			}
			specs := make([]*jobwirev1.JobSpec, outageJobs)
			for i := range specs {
				specs[i] = &jobwirev1.JobSpec{Type: healthyType}
			}
			if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs}); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			// Fail only if they stop moving, as settle does.
			done, deadline := 0, time.Now().Add(brokertest.WaitTimeout)
			for done < outageJobs {
				n, _ := snapshot(t, b, healthyType)
				if n[job.StateSucceeded] > done {
					done, deadline = n[job.StateSucceeded], time.Now().Add(brokertest.WaitTimeout)
				}
				if time.Now().After(deadline) {
					t.Fatalf("healthy jobs stopped short of all succeeding: %v", n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if s := breakerState(t, b, flakyType); s != jobwirev1.BreakerState_BREAKER_STATE_OPEN {
				t.Fatalf("breaker of %s is %s after the healthy jobs ran, want still OPEN", flakyType, s)
			}
		})
		t.Logf("breaker on: %d handler calls during the outage, %d in all; %d succeeded, %d dead",
			got.outageCalls, got.totalCalls, got.succeeded, got.dead)
		// Before the breaker opens, at most the threshold plus one worker's worth of jobs in
		// flight fail; after it, one probe per OpenFor.
		if limit := int64(bc.Threshold + outageConcurrency + outageSteps); got.outageCalls > limit {
			t.Errorf("%d handler calls during the outage, want at most %d", got.outageCalls, limit)
		}
		if got.outageCalls < int64(bc.Threshold) {
			t.Errorf("%d handler calls during the outage, want at least the threshold %d", got.outageCalls, bc.Threshold)
		}
		if got.dead != 0 || got.succeeded != outageJobs {
			t.Errorf("%d succeeded and %d dead, want all %d succeeded", got.succeeded, got.dead, outageJobs)
		}
		if got.totalCalls != got.outageCalls+outageJobs {
			t.Errorf("%d handler calls in all, want one success per job on top of the %d failures", got.totalCalls, got.outageCalls)
		}
	})

	t.Run("breaker off", func(t *testing.T) {
		t.Parallel()
		off := bc
		off.Disabled = true
		got := runOutage(t, off, nil)
		t.Logf("breaker off: %d handler calls during the outage, %d in all; %d succeeded, %d dead",
			got.outageCalls, got.totalCalls, got.succeeded, got.dead)
		// Every job uses up its attempts against the dead dependency and lands in the DLQ.
		if want := int64(outageJobs * maxAttempts); got.outageCalls != want || got.totalCalls != want {
			t.Errorf("%d handler calls during the outage and %d in all, want %d", got.outageCalls, got.totalCalls, want)
		}
		if got.dead != outageJobs {
			t.Errorf("%d dead, want all %d", got.dead, outageJobs)
		}
	})
}

// Failures a CLOSED breaker counts are stored within a second, without waiting for a
// transition or a graceful shutdown, so a crash forgets at most that second of them.
func TestBreakerFailuresAreStoredWithinASecond(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	stored := func() int {
		recs, err := b.Store.BreakerLoadAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			var s breaker.Saved
			if err := json.Unmarshal(r.Data, &s); err != nil {
				t.Fatal(err)
			}
			if s.Type == flakyType {
				return s.FailureCount()
			}
		}
		return 0
	}
	w := b.Connect(brokertest.Hello("w1", 1, flakyType))
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: flakyType}}); err != nil {
		t.Fatal(err)
	}
	a := w.Assignment()
	w.Started(a)
	if ack := w.Fail(a, brokertest.Transient("GatewayDown", 0)).GetResultAck(); ack == nil {
		t.Fatalf("want a result acknowledgement")
	}
	if n := stored(); n != 0 {
		t.Fatalf("%d failures stored at once, want them held back up to a second", n)
	}
	b.Clock.Advance(time.Second)
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for stored() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the failure was not stored a second after it was counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
