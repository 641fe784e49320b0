package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

const (
	// waitTimeout bounds every wait for the broker or a worker to reach a state. Scenarios
	// finish in seconds; the margin is for loaded CI machines.
	waitTimeout = 30 * time.Second
	// pollInterval spaces the polls of a wait.
	pollInterval = 25 * time.Millisecond
)

// scenario is one behaviour every worker library must show.
type scenario struct {
	name string
	cfg  brokerConfig
	run  func(e *env)
}

var scenarios = []scenario{
	{name: "payload_round_trip", run: payloadRoundTrip},
	{name: "fatal_goes_dead", run: fatalGoesDead},
	{name: "transient_then_success", run: transientThenSuccess},
	{name: "transient_until_dead", run: transientUntilDead},
	{name: "retry_after_honoured", run: retryAfterHonoured},
	{name: "slow_handler_outlives_lease", run: slowHandlerOutlivesLease},
	{name: "cancel_running_job", run: cancelRunningJob},
	{name: "attempt_timeout_is_timeout", run: attemptTimeoutIsTimeout},
	{name: "sigkill_mid_job", run: sigkillMidJob},
	{name: "sigterm_drains", run: sigtermDrains},
	{name: "worker_restart", run: workerRestart},
	// The worker must reconnect and keep its lease across a crash of the broker, so the lease is
	// longer than a restart plus the worker's reconnect backoff take on a loaded machine.
	{name: "broker_restart", cfg: brokerConfig{lease: 10 * time.Second}, run: brokerRestart},
	{name: "broker_frozen_past_lease", run: brokerFrozenPastLease},
	{name: "tls_token", cfg: brokerConfig{tls: tlsServer}, run: tlsToken},
	{name: "mtls_token", cfg: brokerConfig{tls: tlsMutual}, run: tlsToken},
	{name: "results_and_progress", run: resultsAndProgress},
}

// TestConformance runs every scenario against the conformance worker of every language, each
// scenario with its own broker process and database: a SQLite file, then a PostgreSQL schema
// (the server JOBWIRE_TEST_POSTGRES names; without it those columns are skipped, and fail under
// CI).
func TestConformance(t *testing.T) {
	if buildSkipped {
		t.Skip("conformance suite skipped in -short mode: it runs real broker and worker processes")
	}
	for _, store := range stores {
		for _, lang := range languages {
			col := column(lang, store)
			t.Run(col, func(t *testing.T) {
				t.Parallel()
				skip := func(reason string, strict bool) {
					status := "SKIP"
					if strict {
						status = "FAIL"
					}
					for _, sc := range scenarios {
						results.record(col, sc.name, outcome{status: status})
					}
					if strict {
						t.Fatal(reason)
					}
					t.Skip(reason)
				}
				if reason := lang.missing(); reason != "" {
					skip(fmt.Sprintf("%s runtime missing: %s (%s=1 makes this a failure)", lang.name, reason, strictEnv),
						os.Getenv(strictEnv) == "1")
				}
				if store == storePostgres && os.Getenv(pgtest.EnvURL) == "" {
					skip(fmt.Sprintf("%s is not set: no PostgreSQL server for the brokers (`make test` starts one)", pgtest.EnvURL),
						pgtest.Required())
				}
				for _, sc := range scenarios {
					t.Run(sc.name, func(t *testing.T) {
						start := time.Now()
						t.Cleanup(func() {
							status := "PASS"
							switch {
							case t.Failed():
								status = "FAIL"
							case t.Skipped():
								status = "SKIP"
							}
							results.record(col, sc.name, outcome{status: status, duration: time.Since(start)})
						})
						sc.run(newEnv(t, lang, store, sc.cfg))
					})
				}
			})
		}
	}
}

// payloadRoundTrip: the bytes a producer enqueues reach the handler unchanged, multi-byte UTF-8,
// escapes and a large payload included.
func payloadRoundTrip(e *env) {
	e.startWorker(e.lang.name + "-1")
	large, err := json.Marshal(map[string]string{"blob": strings.Repeat("Grüße, 世界! 🚀 \\ \" \t", 4000)})
	if err != nil {
		e.t.Fatal(err)
	}
	payloads := map[string][]byte{
		"unicode": []byte(`{"text":"zoë ✓ 日本語 🚀","escaped":"\u00e9\n\"q\"","nested":{"n":-1.5e3,"list":[true,null]}}`),
		"large":   large,
		"empty":   {},
	}
	ids := map[string]int64{}
	for name, p := range payloads {
		ids[name] = e.enqueue("echo", p)
	}
	for name, id := range ids {
		j := e.waitState(id, job.StateSucceeded)
		if j.Attempts != 1 {
			e.t.Errorf("%s: succeeded after %d attempts, want 1", name, j.Attempts)
		}
		if !bytes.Equal(j.Payload, payloads[name]) {
			e.t.Errorf("%s: the broker stored %d bytes that differ from the %d enqueued", name, len(j.Payload), len(payloads[name]))
		}
		if got := e.readMarker(fmt.Sprintf("echo-%d", id)); !bytes.Equal(got, payloads[name]) {
			e.t.Errorf("%s: the handler saw %q, want %q", name, clip(got), clip(payloads[name]))
		}
	}
}

// fatalGoesDead: a fatal failure sends the job to the DLQ after one attempt, with the language's
// error type.
func fatalGoesDead(e *env) {
	e.startWorker(e.lang.name + "-1")
	id := e.enqueue("fatal", nil)
	j := e.waitState(id, job.StateDead)
	if j.DeadReason != job.DeadFatal || j.Attempts != 1 {
		e.t.Errorf("dead with reason %s after %d attempts, want FATAL after 1", j.DeadReason, j.Attempts)
	}
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeFailed, kind: job.KindFatal, errorType: e.lang.fatalType}})
	if j.LastErrorType != e.lang.fatalType || !strings.Contains(j.LastErrorMessage, "fatal by design") {
		e.t.Errorf("last error %s: %q, want %s: ...fatal by design", j.LastErrorType, j.LastErrorMessage, e.lang.fatalType)
	}
}

// transientThenSuccess: transient failures are retried, and the job succeeds once the handler does.
func transientThenSuccess(e *env) {
	e.startWorker(e.lang.name + "-1")
	id := e.enqueueJSON("flaky", map[string]any{"key": "twice", "fail_times": 2})
	j := e.waitState(id, job.StateSucceeded)
	failed := wantAttempt{outcome: job.OutcomeFailed, kind: job.KindTransient, errorType: e.lang.flakyType}
	e.checkAttempts(j, []wantAttempt{failed, failed, {outcome: job.OutcomeSucceeded}})
}

// transientUntilDead: a job that keeps failing transiently dies once max_attempts (3) are spent.
func transientUntilDead(e *env) {
	e.startWorker(e.lang.name + "-1")
	id := e.enqueue("always_transient", nil)
	j := e.waitState(id, job.StateDead)
	if j.DeadReason != job.DeadMaxAttemptsExhausted {
		e.t.Errorf("dead with reason %s, want MAX_ATTEMPTS_EXHAUSTED", j.DeadReason)
	}
	failed := wantAttempt{outcome: job.OutcomeFailed, kind: job.KindTransient, errorType: e.lang.transientType}
	e.checkAttempts(j, []wantAttempt{failed, failed, failed})
}

// retryAfterHonoured: a retry-after replaces the computed backoff (100ms here), so the next attempt
// starts no sooner than asked.
func retryAfterHonoured(e *env) {
	const after = time.Second
	e.startWorker(e.lang.name + "-1")
	id := e.enqueueJSON("retry_after", map[string]any{"seconds": after.Seconds()}, client.MaxAttempts(2))
	j := e.waitState(id, job.StateDead)
	if len(j.History) != 2 {
		e.t.Fatalf("%d attempts recorded, want 2", len(j.History))
	}
	gap := j.History[1].StartedAt.Sub(j.History[0].FinishedAt)
	// The upper bound leaves room for the broker's scheduling tick and a loaded machine; the
	// lower bound is exact because the broker stamps both times with its own clock.
	if gap < after || gap > after+3*time.Second {
		e.t.Errorf("attempt 2 started %s after attempt 1 ended, want at least %s and not much more", gap, after)
	}
	e.t.Logf("retry-after %s, observed gap %s", after, gap)
}

// slowHandlerOutlivesLease: heartbeats keep a lease alive while a handler runs 2.5 times longer
// than the lease, so the first attempt succeeds.
func slowHandlerOutlivesLease(e *env) {
	const lease, run = defaultLease, defaultLease * 5 / 2
	e.startWorker(e.lang.name + "-1")
	id := e.enqueueJSON("slow", map[string]any{"ms": run.Milliseconds()})
	j := e.waitState(id, job.StateSucceeded)
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeSucceeded}})
	// The broker stamps the attempt's start when Started arrives, a moment after the handler
	// began, so compare with whole leases rather than with run itself.
	if d := j.History[0].FinishedAt.Sub(j.History[0].StartedAt); d < 2*lease {
		e.t.Errorf("the attempt took %s by the broker's clock, want more than two leases (%s)", d, 2*lease)
	}
}

// cancelRunningJob: CancelJob reaches the running handler, which sees reason "requested".
func cancelRunningJob(e *env) {
	e.startWorker(e.lang.name + "-1")
	id := e.enqueue("wait_cancel", nil)
	e.waitState(id, job.StateRunning)
	if _, err := e.c.Cancel(e.t.Context(), id); err != nil {
		e.t.Fatal(err)
	}
	j := e.waitState(id, job.StateCancelled)
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeCancelled}})
	if reason := string(e.readMarker(fmt.Sprintf("cancelled-%d", id))); reason != "requested" {
		e.t.Errorf("the handler saw cancel reason %q, want requested", reason)
	}
}

// attemptTimeoutIsTimeout: a handler that outlives its attempt timeout is stopped (by the worker
// library, which reports Failure.timed_out, or by the broker's Cancel, whichever comes first),
// and a job that only ever times out dies with reason TIMEOUT, every attempt a TIMEOUT.
func attemptTimeoutIsTimeout(e *env) {
	e.startWorker(e.lang.name + "-1")
	id := e.enqueueJSON("block", map[string]any{"marker": "timeout"}, client.MaxAttempts(2), client.AttemptTimeout(time.Second))
	j := e.waitState(id, job.StateDead)
	if j.DeadReason != job.DeadTimeout {
		e.t.Errorf("job %d is %s, want DEAD (TIMEOUT): %s", id, describe(j), describeAttempts(j.History))
	}
	e.checkAttempts(j, []wantAttempt{
		{outcome: job.OutcomeTimeout, kind: job.KindTransient, errorType: "TIMEOUT"},
		{outcome: job.OutcomeTimeout, kind: job.KindTransient, errorType: "TIMEOUT"},
	})
}

// sigkillMidJob: a worker killed mid-job loses its lease; the attempt ends LEASE_EXPIRED and the
// job runs again on another worker.
func sigkillMidJob(e *env) {
	idA, idB := e.lang.name+"-a", e.lang.name+"-b"
	a := e.startWorker(idA)
	id := e.enqueueJSON("block", map[string]any{"marker": "killed"})
	e.readMarker("started-killed")
	e.waitRunning(id, 1, idA)
	e.startWorker(idB)
	a.kill(e.t)

	j := e.waitRunning(id, 2, idB)
	if len(j.History) < 1 || j.History[0].WorkerID != idA || j.History[0].Outcome != job.OutcomeLeaseExpired {
		e.t.Errorf("attempt 1 = %s, want LEASE_EXPIRED on %s", describeAttempts(j.History), idA)
	}
	// block only ends when cancelled; the cancel shows the second worker really holds the job.
	if _, err := e.c.Cancel(e.t.Context(), id); err != nil {
		e.t.Fatal(err)
	}
	e.waitState(id, job.StateCancelled)
}

// sigtermDrains: SIGTERM stops a worker gracefully: it takes no new work, lets a job finish within
// the grace, reports one that outlives it as a transient failure, and exits 0. Nothing is lost:
// another worker runs what is left.
func sigtermDrains(e *env) {
	const grace = 3 * time.Second
	w := e.startWorker(e.lang.name+"-1", "JOBWIRE_CAPACITY=2", fmt.Sprintf("JOBWIRE_GRACE_SECONDS=%d", int(grace.Seconds())))
	short := e.enqueueJSON("slow", map[string]any{"ms": 1500})
	long := e.enqueueJSON("block", map[string]any{"marker": "drain"})
	e.waitState(short, job.StateRunning)
	e.waitState(long, job.StateRunning)
	// The worker is full, so these wait in the queue.
	waiting := []int64{e.enqueue("echo", []byte(`{"n":1}`)), e.enqueue("echo", []byte(`{"n":2}`))}

	w.signal(e.t, syscall.SIGTERM)
	took, code := w.waitExit(e.t, grace+10*time.Second)
	if code != 0 {
		e.t.Errorf("worker exited with code %d after SIGTERM, want 0", code)
	}
	if took > grace+5*time.Second {
		e.t.Errorf("worker took %s to exit with a %s grace", took, grace)
	}
	e.t.Logf("worker exited %s after SIGTERM (grace %s)", took, grace)

	j := e.waitState(short, job.StateSucceeded)
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeSucceeded}})
	j = e.waitJob(long, "back in the queue after a transient failure", func(j *job.Job) bool {
		return j.State == job.StateScheduled || j.State == job.StatePending
	})
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeFailed, kind: job.KindTransient, errorType: shutdownErrorType}})
	for _, id := range waiting {
		if j := e.get(id); j.State != job.StatePending || j.Attempts != 0 {
			e.t.Errorf("job %d is %s after %d attempts, want PENDING and untouched", id, j.State, j.Attempts)
		}
	}

	next := e.lang.name + "-2"
	e.startWorker(next)
	for _, id := range waiting {
		e.waitState(id, job.StateSucceeded)
	}
	e.waitRunning(long, 2, next)
	if _, err := e.c.Cancel(e.t.Context(), long); err != nil {
		e.t.Fatal(err)
	}
	e.waitState(long, job.StateCancelled)
}

// workerRestart: jobs enqueued while no worker runs wait in the broker and run once a worker is
// back; a flaky counter kept on disk carries over.
func workerRestart(e *env) {
	id := e.lang.name + "-1"
	w := e.startWorker(id)
	e.waitState(e.enqueue("echo", []byte(`{"phase":"before"}`)), job.StateSucceeded)
	w.signal(e.t, syscall.SIGTERM)
	if _, code := w.waitExit(e.t, 15*time.Second); code != 0 {
		e.t.Fatalf("worker exited with code %d after SIGTERM, want 0", code)
	}

	var queued []int64
	for i := range 3 {
		queued = append(queued, e.enqueue("echo", fmt.Appendf(nil, `{"phase":"while stopped","n":%d}`, i)))
	}
	flaky := e.enqueueJSON("flaky", map[string]any{"key": "restart", "fail_times": 1})
	for _, id := range append(queued, flaky) {
		if j := e.get(id); j.State != job.StatePending {
			e.t.Errorf("job %d is %s with no worker running, want PENDING", id, j.State)
		}
	}

	e.startWorker(id)
	for _, q := range queued {
		j := e.waitState(q, job.StateSucceeded)
		if j.History[0].WorkerID != id {
			e.t.Errorf("job %d ran on %q, want %q", q, j.History[0].WorkerID, id)
		}
	}
	j := e.waitState(flaky, job.StateSucceeded)
	failed := wantAttempt{outcome: job.OutcomeFailed, kind: job.KindTransient, errorType: e.lang.flakyType}
	e.checkAttempts(j, []wantAttempt{failed, {outcome: job.OutcomeSucceeded}})
}

// brokerRestart: the worker process outlives two broker restarts, a graceful one and a crash, and
// reconnects each time; jobs enqueued before (including a delayed one) and after succeed, and a job
// running across the crash keeps its lease and succeeds on its first attempt.
func brokerRestart(e *env) {
	id := e.lang.name + "-1"
	w := e.startWorker(id)
	before := e.enqueue("echo", []byte(`{"phase":"before"}`))
	e.waitState(before, job.StateSucceeded)
	delayed := e.enqueue("echo", []byte(`{"phase":"delayed"}`), client.Delay(1500*time.Millisecond))

	// A graceful stop: the broker asks the worker to drain, then exits 0.
	e.broker.p.signal(e.t, syscall.SIGTERM)
	took, code := e.broker.p.waitExit(e.t, 15*time.Second)
	if code != 0 {
		e.t.Fatalf("broker exited with code %d after SIGTERM, want 0", code)
	}
	e.t.Logf("broker exited %s after SIGTERM", took.Round(time.Millisecond))
	e.broker.restart()
	after := e.enqueue("echo", []byte(`{"phase":"after graceful restart"}`))
	for _, j := range []int64{delayed, after} {
		if got := e.waitState(j, job.StateSucceeded); got.History[0].WorkerID != id {
			e.t.Errorf("job %d ran on %q, want %q", j, got.History[0].WorkerID, id)
		}
	}

	// A crash while a job runs: the worker keeps running it, reconnects, and the new broker
	// adopts the lease it still holds.
	slow := e.enqueueJSON("slow", map[string]any{"ms": 4000})
	e.waitState(slow, job.StateRunning)
	e.broker.p.kill(e.t)
	e.broker.restart()
	crash := e.enqueue("echo", []byte(`{"phase":"after crash"}`))
	reconnected := time.Now()
	e.waitState(crash, job.StateSucceeded)
	e.t.Logf("the worker ran a job %s after the broker was back", time.Since(reconnected).Round(time.Millisecond))
	j := e.waitState(slow, job.StateSucceeded)
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeSucceeded}})
	if j := e.get(before); j.State != job.StateSucceeded {
		e.t.Errorf("job %d enqueued before the restarts is %s, want SUCCEEDED", before, j.State)
	}
	if w.exited() {
		e.t.Errorf("worker exited (%v) across broker restarts; it should reconnect", w.state)
	}
}

// enqueue adds a job and returns its id.
func (e *env) enqueue(typ string, payload []byte, opts ...client.EnqueueOption) int64 {
	e.t.Helper()
	res, err := e.c.Enqueue(e.t.Context(), typ, payload, opts...)
	if err != nil {
		e.t.Fatalf("enqueue %s: %v", typ, err)
	}
	return res.ID
}

func (e *env) enqueueJSON(typ string, v any, opts ...client.EnqueueOption) int64 {
	e.t.Helper()
	payload, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.enqueue(typ, payload, opts...)
}

func (e *env) get(id int64) *job.Job {
	e.t.Helper()
	j, err := e.c.Get(e.t.Context(), id)
	if err != nil {
		e.t.Fatalf("get job %d: %v", id, err)
	}
	return j
}

// waitState waits for the job to reach state.
func (e *env) waitState(id int64, state job.State) *job.Job {
	e.t.Helper()
	return e.waitJob(id, state.String(), func(j *job.Job) bool { return j.State == state })
}

// waitJob polls the job until ok accepts it. A job that reaches a final state ok rejects fails the
// test at once instead of at the deadline. Errors from the broker are retried: it may be
// restarting.
func (e *env) waitJob(id int64, want string, ok func(*job.Job) bool) *job.Job {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last *job.Job
	var lastErr error
	for {
		j, err := e.c.Get(e.t.Context(), id)
		if err == nil {
			if ok(j) {
				return j
			}
			last = j
			if j.State.Final() {
				e.t.Fatalf("job %d (%s) ended %s, want %s; attempts: %s", id, j.Type, describe(j), want, describeAttempts(j.History))
			}
		} else {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				e.t.Fatalf("job %d: no answer from the broker within %s: %v", id, waitTimeout, lastErr)
			}
			e.t.Fatalf("job %d (%s) is %s after %s, want %s; attempts: %s", id, last.Type, describe(last), waitTimeout, want, describeAttempts(last.History))
		}
		time.Sleep(pollInterval)
	}
}

// waitRunning waits for attempt number n of the job to run on workerID. The job's history lists the
// running attempt last.
func (e *env) waitRunning(id int64, n int, workerID string) *job.Job {
	e.t.Helper()
	return e.waitJob(id, fmt.Sprintf("attempt %d running on %s", n, workerID), func(j *job.Job) bool {
		if j.State != job.StateRunning || len(j.History) != n {
			return false
		}
		a := j.History[n-1]
		return a.Number == n && a.Outcome == job.OutcomeRunning && a.WorkerID == workerID
	})
}

// readMarker waits for a conformance worker's marker file and returns its content.
func (e *env) readMarker(name string) []byte {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	deadline := time.Now().Add(waitTimeout)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			return data
		}
		if !errors.Is(err, os.ErrNotExist) {
			e.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("marker file %s not written within %s", name, waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// wantAttempt is what one attempt in a job's history should show; zero fields are not checked.
type wantAttempt struct {
	outcome   job.Outcome
	kind      job.FailureKind
	errorType string
}

// checkAttempts compares a job's attempt history with want, attempt by attempt.
func (e *env) checkAttempts(j *job.Job, want []wantAttempt) {
	e.t.Helper()
	if len(j.History) != len(want) || j.Attempts != len(want) {
		e.t.Errorf("job %d has %d attempts (%d recorded), want %d: %s", j.ID, j.Attempts, len(j.History), len(want), describeAttempts(j.History))
		return
	}
	for i, w := range want {
		a := j.History[i]
		if a.Number != i+1 || a.Outcome != w.outcome ||
			(w.kind != job.KindUnspecified && a.FailureKind != w.kind) ||
			(w.errorType != "" && a.ErrorType != w.errorType) {
			e.t.Errorf("job %d attempt %d: got %s, want #%d %s %s %s", j.ID, i+1, describeAttempt(a), i+1, w.outcome, w.kind, w.errorType)
		}
	}
}

func describe(j *job.Job) string {
	s := fmt.Sprintf("%s after %d attempts", j.State, j.Attempts)
	if j.State == job.StateDead {
		s += " (" + j.DeadReason.String() + ")"
	}
	return s
}

func describeAttempt(a job.Attempt) string {
	s := fmt.Sprintf("#%d %s on %s", a.Number, a.Outcome, a.WorkerID)
	if a.Outcome == job.OutcomeFailed || a.Outcome == job.OutcomeTimeout {
		s += fmt.Sprintf(" %s %s: %s", a.FailureKind, a.ErrorType, a.Message)
	}
	return s
}

func describeAttempts(h []job.Attempt) string {
	if len(h) == 0 {
		return "none"
	}
	parts := make([]string, len(h))
	for i, a := range h {
		parts[i] = describeAttempt(a)
	}
	return strings.Join(parts, "; ")
}

// clip shortens a payload for a failure message.
func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
