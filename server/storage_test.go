package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	"github.com/jobwire/jobwire/worker"
	sqlite3 "modernc.org/sqlite/lib"
)

// checkAttempts fails unless job id finished in want after exactly attempts attempts, each with
// one history record, and the type's breaker counted no failure.
func checkAttempts(t *testing.T, b *brokertest.Bundle, id int64, want jobwirev1.JobState, attempts int32) {
	t.Helper()
	j := getJob(t, b, id)
	if j.GetState() != want || j.GetAttempts() != attempts || len(j.GetAttemptHistory()) != int(attempts) {
		t.Errorf("job %d: state %s, %d attempts, %d in history; want %s and %d of each",
			id, j.GetState(), j.GetAttempts(), len(j.GetAttemptHistory()), want, attempts)
	}
}

func checkBreakersQuiet(t *testing.T, b *brokertest.Bundle) {
	t.Helper()
	res, err := b.Admin.ListBreakers(context.Background(), &jobwirev1.ListBreakersRequest{})
	if err != nil {
		t.Fatalf("list breakers: %v", err)
	}
	for _, br := range res.GetBreakers() {
		if br.GetFailuresInWindow() != 0 || br.GetState() != jobwirev1.BreakerState_BREAKER_STATE_CLOSED {
			t.Errorf("breaker %s: %s with %d failures, want CLOSED with none: storage faults must not count",
				br.GetType(), br.GetState(), br.GetFailuresInWindow())
		}
	}
}

// Busy storage on the enqueue, lease, start and result writes is retried by the broker; the
// job runs once, its attempt count and history show one attempt, and the retries are counted.
// Each write fails on its first tries before its transaction, inside it, or after its commit,
// when the retry runs again a write that already happened.
func TestStorageBusyIsRetriedWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		phase brokertest.Phase
		tries int // failed tries of every write
	}{{brokertest.FaultBefore, 2}, {brokertest.FaultInside, 2}, {brokertest.FaultAfterCommit, 1}} {
		t.Run(tc.phase.String(), func(t *testing.T) {
			t.Parallel()
			f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
			f.InjectEveryCall(tc.phase, tc.tries, "enqueue", "lease", "start", "result", "batch")
			b := brokertest.New(t, brokertest.Options{Faults: f})
			w := b.Connect(brokertest.Hello("w1", 1, "t"))

			id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
			a := w.Assignment()
			if a.GetJob().GetId() != id || a.GetAttempt() != 1 {
				t.Fatalf("assignment = %v, want job %d attempt 1", a, id)
			}
			w.Started(a)
			if r := ack(t, w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
				t.Fatalf("decision = %s, want SUCCEEDED", r.GetDecision())
			}
			checkAttempts(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1)

			// A failed attempt after busy storage counts once too: it is retried, then succeeds.
			id2 := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
			a = w.Assignment()
			w.Started(a)
			if r := ack(t, w.Fail(a, brokertest.Transient("Timeout", 0))); r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
				t.Fatalf("decision = %s, want RETRY", r.GetDecision())
			}
			// The one failure the handler reported counts; the storage faults do not.
			checkBreaker(t, b, 1)
			b.Advance(time.Hour) // past the job's backoff
			a = w.Assignment()
			if a.GetJob().GetId() != id2 || a.GetAttempt() != 2 {
				t.Fatalf("assignment = %v, want job %d attempt 2", a, id2)
			}
			w.Started(a)
			ack(t, w.Succeed(a))
			checkAttempts(t, b, id2, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 2)
			checkBreakersQuiet(t, b)
			onlyJobs(t, b, id, id2)

			// Writes that share a commit go through as one "batch": an enqueue and the lease of
			// the job it made ready always do, and so do a start and its result that arrive
			// together.
			for _, op := range []string{"enqueue|batch", "lease|batch", "result|batch"} {
				n := 0
				for _, name := range strings.Split(op, "|") {
					n += f.Tries(name)
				}
				if n == 0 {
					t.Errorf("no %s write went through the fault injector", op)
				}
			}
			if got, want := b.Store.StorageRetries()[sqlite.CodeName(sqlite3.SQLITE_BUSY)], f.Injected(); got != want || got == 0 {
				t.Errorf("StorageRetries() = %v, want SQLITE_BUSY: %d, one per injected fault", b.Store.StorageRetries(), want)
			}
		})
	}
}

// A result whose commit succeeded but was reported as busy is run again; the rerun finds the
// result stored, so the attempt is counted once and the worker is told the decision.
func TestResultRetriedAfterAmbiguousCommitCountsOnce(t *testing.T) {
	t.Parallel()
	f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: f})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING) // the start is stored alone before
	// The result writes alone, or with the round that its freed slot lets run ("batch").
	tries := func() int { return f.Tries("result") + f.Tries("batch") }
	before := tries()
	f.Inject(brokertest.FaultAfterCommit, 1, "result", "batch")
	r := ack(t, w.Fail(a, brokertest.Transient("Timeout", 0)))
	if n := tries() - before; n != 2 {
		t.Fatalf("result write ran %d times, want it run again after the ambiguous commit", n)
	}
	if r.GetDecision() != jobwirev1.Decision_DECISION_RETRY || r.GetJobId() != id || r.GetRetryAt() == nil {
		t.Fatalf("answer to a result committed on the first try and run again: %v, want RETRY with a time", r)
	}
	checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_SCHEDULED, 1, jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED)
	if j := getJob(t, b, id); !j.GetRunAt().AsTime().Equal(r.GetRetryAt().AsTime()) {
		t.Fatalf("job runs again at %s, the worker was told %s", j.GetRunAt().AsTime(), r.GetRetryAt().AsTime())
	}
	checkBreaker(t, b, 1)
}

// holdWriteLock takes the database's write lock from a second connection, as another process
// holding the file would, and returns the function that lets it go. It waits for a write the
// broker may have in flight.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := c.ExecContext(context.Background(), `ROLLBACK`); err != nil {
				t.Errorf("ROLLBACK: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// shortStorage makes a held lock exhaust the broker's retries in about 60ms.
var shortStorage = storeretry.Options{MaxTransientRetries: 2, CommandTimeout: 10 * time.Second}

const shortBusyTimeout = 20 * time.Millisecond

// Workers report results while another connection holds the write lock for much longer than
// the broker's busy timeout and retries. The broker refuses the results as UNAVAILABLE, the
// worker library sends them again, and once the lock goes every job is finished exactly once.
func TestResultsSurviveALockHeldByAnotherConnection(t *testing.T) {
	t.Parallel()
	const jobs, concurrency = 12, 4
	b := brokertest.New(t, brokertest.Options{Storage: &shortStorage, BusyTimeout: shortBusyTimeout})
	gate := make(chan struct{})
	var running, calls atomic.Int64
	w, err := worker.New(b.Conn, worker.Options{ID: "sdk", Concurrency: concurrency, ShutdownGrace: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", func(ctx context.Context, j *worker.Job) error {
		calls.Add(1)
		running.Add(1)
		<-gate
		if j.ID%3 == 0 {
			return worker.Fatal(errDependency)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ids := make([]int64, jobs)
	for i := range ids {
		ids[i] = enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	}
	brokertest.WaitFor(t, "every handler to run", func() bool { return running.Load() == concurrency })

	release := holdWriteLock(t, b.DBPath)
	close(gate) // the first handlers report while the lock is held
	// The lock must be held on the wall clock: 300ms is many times the ~60ms the broker
	// retries for, so every result write of the first wave fails at least once.
	time.Sleep(300 * time.Millisecond)
	if got := b.Store.StorageRetries()["SQLITE_BUSY"]; got == 0 {
		t.Errorf("no SQLITE_BUSY retry while the lock was held: %v", b.Store.StorageRetries())
	}
	release()

	for _, id := range ids {
		want := jobwirev1.JobState_JOB_STATE_SUCCEEDED
		if id%3 == 0 {
			want = jobwirev1.JobState_JOB_STATE_DEAD
		}
		b.WaitState(id, want)
		checkAttempts(t, b, id, want, 1)
	}
	if calls.Load() != jobs {
		t.Errorf("handlers ran %d times, want once per job (%d)", calls.Load(), jobs)
	}
}

var errDependency = &dependencyError{}

type dependencyError struct{}

func (*dependencyError) Error() string { return "bad input" }

// A lock held past every retry gives the producer UNAVAILABLE with a message that says storage
// is busy and to retry; the exhaustion is logged; once the lock goes the same broker enqueues
// and dispatches again without a restart.
func TestStorageExhaustedIsUnavailableAndBrokerRecovers(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	policy, err := storeretry.New(storeretry.Config{Options: shortStorage, Classify: sqlite.Classify,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.New(t, brokertest.Options{Retry: policy, BusyTimeout: shortBusyTimeout})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))

	release := holdWriteLock(t, b.DBPath)
	_, err = b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}})
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("enqueue under a held lock: %v, want UNAVAILABLE", err)
	}
	for _, want := range []string{"storage is busy", "SQLITE_BUSY after 3 tries", "retry it shortly"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not say %q", st.Message(), want)
		}
	}
	// The enqueue's commit carries it alone, under its own name, when its job is offered to the
	// worker with room; when the worker's first round failed under the same lock, jobs may be
	// waiting, nothing is offered, and the commit carries the enqueue with a round ("batch").
	if !strings.Contains(logs.String(), `"msg":"storage retries exhausted"`) ||
		!(strings.Contains(logs.String(), `"op":"enqueue"`) || strings.Contains(logs.String(), `"op":"batch"`)) {
		t.Errorf("log %q has no exhaustion line for the enqueue's commit", logs.String())
	}
	if got := b.Store.StorageRetries()["SQLITE_BUSY"]; got < 2 {
		t.Errorf("StorageRetries() = %v, want at least the 2 retries of the enqueue", b.Store.StorageRetries())
	}
	release()
	// An operator sees the same counters in the stats.
	stats, err := b.Admin.GetStats(context.Background(), &jobwirev1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := stats.GetStorageRetries()["SQLITE_BUSY"]; got < 2 {
		t.Errorf("GetStats storage_retries = %v, want at least the 2 retries of the enqueue", stats.GetStorageRetries())
	}

	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	if a.GetJob().GetId() != id {
		t.Fatalf("assignment for job %d, want %d", a.GetJob().GetId(), id)
	}
	w.Started(a)
	ack(t, w.Succeed(a))
	checkAttempts(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1)
	jobs, err := b.Store.JobList(context.Background(), &store.JobListParams{Limit: 100})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %d, %v; want only the one enqueued after the lock went", len(jobs), err)
	}
	checkBreakersQuiet(t, b)
}

// syncBuffer is a bytes.Buffer safe for the broker's goroutines to log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
