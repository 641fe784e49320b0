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

// busyFault is the SQLITE_BUSY a fault-injecting Retrier returns. It carries the real result
// code, so sqlite.Classify treats it exactly like the driver's error.
type busyFault struct{}

func (busyFault) Error() string { return "injected: database is locked (SQLITE_BUSY)" }
func (busyFault) Code() int     { return sqlite3.SQLITE_BUSY }

// faultRetrier runs the real storage retry policy, failing the operations named in ops:
// before: the first `before` tries of each such operation fail with SQLITE_BUSY without
// running; after: the first try runs (and commits) and then reports SQLITE_BUSY anyway, the
// ambiguous failure a lost commit acknowledgement would cause, so the policy runs it again.
type faultRetrier struct {
	policy *storeretry.Policy
	ops    map[string]bool
	before int
	after  bool

	injected atomic.Int64
	mu       sync.Mutex
	calls    map[string]int // tries of each targeted operation
}

func newFaultRetrier(t *testing.T, before int, after bool, ops ...string) *faultRetrier {
	t.Helper()
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Logger: slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 3, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	f := &faultRetrier{policy: p, ops: map[string]bool{}, before: before, after: after, calls: map[string]int{}}
	for _, op := range ops {
		f.ops[op] = true
	}
	return f
}

func (f *faultRetrier) Do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if !f.ops[op] {
		return f.policy.Do(ctx, op, fn)
	}
	try := 0
	return f.policy.Do(ctx, op, func(ctx context.Context) error {
		try++
		f.mu.Lock()
		f.calls[op]++
		f.mu.Unlock()
		if try <= f.before {
			f.injected.Add(1)
			return busyFault{}
		}
		if err := fn(ctx); err != nil || !f.after || try > f.before+1 {
			return err
		}
		f.injected.Add(1)
		return busyFault{}
	})
}

// Counters lets the store report the policy's counters through StorageRetries.
func (f *faultRetrier) Counters() map[string]int64 { return f.policy.Counters() }

func (f *faultRetrier) tries(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

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
func TestStorageBusyIsRetriedWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	f := newFaultRetrier(t, 2, false, "enqueue", "lease", "start", "result", "batch")
	b := brokertest.New(t, brokertest.Options{Retry: f})
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
	b.Advance(time.Hour) // past the job's backoff
	a = w.Assignment()
	if a.GetJob().GetId() != id2 || a.GetAttempt() != 2 {
		t.Fatalf("assignment = %v, want job %d attempt 2", a, id2)
	}
	w.Started(a)
	ack(t, w.Succeed(a))
	checkAttempts(t, b, id2, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 2)
	checkBreakersQuiet(t, b)

	// Writes that share a commit go through as one "batch": an enqueue and the lease of the
	// job it made ready always do, and so do a start and its result that arrive together.
	for _, op := range []string{"enqueue|batch", "lease|batch", "result|batch"} {
		n := 0
		for _, name := range strings.Split(op, "|") {
			n += f.tries(name)
		}
		if n == 0 {
			t.Errorf("no %s write went through the fault injector", op)
		}
	}
	if got, want := b.Store.StorageRetries()[sqlite.CodeName(sqlite3.SQLITE_BUSY)], f.injected.Load(); got != want || got == 0 {
		t.Errorf("StorageRetries() = %v, want SQLITE_BUSY: %d, one per injected fault", b.Store.StorageRetries(), want)
	}
}

// An enqueue whose commit succeeded but was reported as busy is run again by the policy; the
// idempotency key makes the second run find the first job instead of adding another.
func TestEnqueueRetriedAfterAmbiguousCommitAddsNoDuplicate(t *testing.T) {
	t.Parallel()
	f := newFaultRetrier(t, 0, true, "enqueue")
	b := brokertest.New(t, brokertest.Options{Retry: f})

	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{
		Type: "t", IdempotencyKey: "order-42"}})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if f.tries("enqueue") != 2 {
		t.Fatalf("enqueue ran %d times, want 2 (committed, reported busy, run again)", f.tries("enqueue"))
	}
	jobs, err := b.Store.JobList(context.Background(), &store.JobListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != res.GetJob().GetId() {
		t.Fatalf("jobs after a retried enqueue: %d (first id %v), want exactly job %d", len(jobs), jobs, res.GetJob().GetId())
	}
}

// A result whose commit succeeded but was reported as busy is run again; the fencing token
// makes the second run change nothing, so the attempt is counted once.
func TestResultRetriedAfterAmbiguousCommitCountsOnce(t *testing.T) {
	t.Parallel()
	// "batch": the start and the result may arrive in time to be committed together.
	f := newFaultRetrier(t, 0, true, "result", "batch")
	b := brokertest.New(t, brokertest.Options{Retry: f})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	m := w.Fail(a, brokertest.Transient("Timeout", 0))
	if n := f.tries("result") + f.tries("batch"); n < 2 {
		t.Fatalf("result write ran %d times, want it run again after the ambiguous commit", n)
	}
	t.Logf("answer to a result committed on the first try and re-run: %v", m)
	j := getJob(t, b, id)
	if j.GetAttempts() != 1 || len(j.GetAttemptHistory()) != 1 || j.GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED {
		t.Fatalf("job: state %s, %d attempts, %d in history; want SCHEDULED after 1 attempt",
			j.GetState(), j.GetAttempts(), len(j.GetAttemptHistory()))
	}
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
	waitFor(t, func() bool { return running.Load() == concurrency })

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
		waitState(t, b, id, want)
		checkAttempts(t, b, id, want, 1)
	}
	if calls.Load() != jobs {
		t.Errorf("handlers ran %d times, want once per job (%d)", calls.Load(), jobs)
	}
}

var errDependency = &dependencyError{}

type dependencyError struct{}

func (*dependencyError) Error() string { return "bad input" }

// waitFor polls cond until it holds, failing after brokertest.WaitTimeout.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

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
	// The enqueue and the lease of the job it makes ready share one commit, named "batch".
	if !strings.Contains(logs.String(), `"msg":"storage retries exhausted"`) || !strings.Contains(logs.String(), `"op":"batch"`) {
		t.Errorf("log %q has no exhaustion line for the enqueue's commit", logs.String())
	}
	if got := b.Store.StorageRetries()["SQLITE_BUSY"]; got < 2 {
		t.Errorf("StorageRetries() = %v, want at least the 2 retries of the enqueue", b.Store.StorageRetries())
	}
	release()

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
