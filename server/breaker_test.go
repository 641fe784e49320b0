package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// These tests drive the circuit breakers end to end: a real broker on loopback, workers that
// speak the protocol message by message, the breaker state read back over the admin API.

const (
	// flaky is the job type whose dependency fails in these tests.
	flaky = "flaky"
	// canaryType is a healthy type the test workers also serve; see canary.
	canaryType = "canary"
	openFor    = breaker.DefaultOpenFor
)

var (
	stateOpen     = jobwirev1.BreakerState_BREAKER_STATE_OPEN
	stateHalfOpen = jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN
	stateClosed   = jobwirev1.BreakerState_BREAKER_STATE_CLOSED
)

// testBreakerConfig opens after 2 failures. Its window and probe timeout are long enough that
// nothing ages out while a test moves the clock by a few OpenFor periods, unless the test
// shortens them.
func testBreakerConfig() breaker.Config {
	c := breaker.CountConfig()
	c.Threshold = 2
	c.Window = 10 * time.Minute
	c.ProbeTimeout = 10 * time.Minute
	return c
}

func newBreakerBroker(t *testing.T, c breaker.Config) *brokertest.Bundle {
	t.Helper()
	return brokertest.New(t, brokertest.Options{Breakers: &broker.BreakerOptions{Default: c}})
}

func listBreakers(t *testing.T, b *brokertest.Bundle) []*jobwirev1.BreakerInfo {
	t.Helper()
	res, err := b.Admin.ListBreakers(context.Background(), &jobwirev1.ListBreakersRequest{})
	if err != nil {
		t.Fatalf("list breakers: %v", err)
	}
	return res.GetBreakers()
}

func findBreaker(bs []*jobwirev1.BreakerInfo, typ string) *jobwirev1.BreakerInfo {
	for _, br := range bs {
		if br.GetType() == typ {
			return br
		}
	}
	return nil
}

// breakerOf reads typ's breaker over the admin API.
func breakerOf(t *testing.T, b *brokertest.Bundle, typ string) *jobwirev1.BreakerInfo {
	t.Helper()
	br := findBreaker(listBreakers(t, b), typ)
	if br == nil {
		t.Fatalf("ListBreakers has no breaker for %q", typ)
	}
	return br
}

// waitBreaker polls typ's breaker until ok accepts it; some changes (a session closing, a
// write committing) reach the breaker on the broker's own goroutines.
func waitBreaker(t *testing.T, b *brokertest.Bundle, typ, want string, ok func(*jobwirev1.BreakerInfo) bool) *jobwirev1.BreakerInfo {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		br := findBreaker(listBreakers(t, b), typ)
		if br != nil && ok(br) {
			return br
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker of %q never became %s; last seen: %v", typ, want, br)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// breakerIs returns a condition on a breaker's state, probes in flight, counted failures and
// generation.
func breakerIs(state jobwirev1.BreakerState, probes, failures int32, gen int64) func(*jobwirev1.BreakerInfo) bool {
	return func(br *jobwirev1.BreakerInfo) bool {
		return br.GetState() == state && br.GetProbesInFlight() == probes &&
			br.GetFailuresInWindow() == failures && br.GetGeneration() == gen
	}
}

// assignment waits for w's next assignment, skipping the Cancel messages a test may cause on
// the way (a lease that expired, a job cancelled by the test).
func assignment(t *testing.T, w *brokertest.RawWorker) *jobwirev1.Assignment {
	t.Helper()
	for {
		m := w.Next()
		if a := m.GetAssignment(); a != nil {
			return a
		}
		if m.GetCancel() == nil {
			t.Fatalf("expected an assignment, got %v", m)
		}
	}
}

func enqueueType(t *testing.T, b *brokertest.Bundle, typ string, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = enqueue(t, b, &jobwirev1.JobSpec{Type: typ})
	}
	return ids
}

// trip fails n fresh flaky jobs on w, one at a time; with n at the threshold the breaker
// opens. It returns the failed jobs' ids: they wait for their retry, SCHEDULED.
func trip(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		id := enqueue(t, b, &jobwirev1.JobSpec{Type: flaky})
		a := assignment(t, w)
		if a.GetJob().GetId() != id {
			t.Fatalf("assigned job %d, want %d", a.GetJob().GetId(), id)
		}
		w.Started(a)
		if d := ack(t, w.Fail(a, brokertest.Transient("ConnectionRefused", 0))).GetDecision(); d != jobwirev1.Decision_DECISION_RETRY {
			t.Fatalf("decision = %s, want RETRY", d)
		}
		ids = append(ids, id)
	}
	return ids
}

// canary proves that the dispatcher ran a round after everything the test did so far: it
// enqueues a job of canaryType, which w also serves, and expects it as w's next assignment.
// Any flaky job the dispatcher could hand to w is older than the canary, so it would come
// first.
func canary(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker) {
	t.Helper()
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: canaryType})
	a := assignment(t, w)
	if a.GetJob().GetId() != id {
		t.Fatalf("assigned job %d of type %q; want only the canary, job %d", a.GetJob().GetId(), a.GetJob().GetType(), id)
	}
	w.Started(a)
	ack(t, w.Succeed(a))
}

func wantJob(t *testing.T, b *brokertest.Bundle, id int64, state jobwirev1.JobState, attempts int32) {
	t.Helper()
	j := getJob(t, b, id)
	if j.GetState() != state || j.GetAttempts() != attempts {
		t.Fatalf("job %d is %s with %d attempts, want %s with %d", id, j.GetState(), j.GetAttempts(), state, attempts)
	}
}

func succeed(t *testing.T, w *brokertest.RawWorker, a *jobwirev1.Assignment) {
	t.Helper()
	w.Started(a)
	if d := ack(t, w.Succeed(a)).GetDecision(); d != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision = %s, want SUCCEEDED", d)
	}
}

func TestBreakerOpenHoldsJobsPendingInOrder(t *testing.T) {
	t.Parallel()
	b := newBreakerBroker(t, testBreakerConfig())
	w := b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))
	tripped := trip(t, b, w, 2)

	br := breakerOf(t, b, flaky)
	if br.GetState() != stateOpen || br.GetFailuresInWindow() != 2 || br.GetProbesInFlight() != 0 ||
		!br.GetOpenedAt().AsTime().Equal(brokertest.Start) || !br.GetNextProbeAt().AsTime().Equal(brokertest.Start.Add(openFor)) {
		t.Fatalf("after 2 failures: %v", br)
	}

	held := enqueueType(t, b, flaky, 5)
	canary(t, b, w)
	for _, id := range held {
		wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_PENDING, 0)
	}
	for _, id := range tripped {
		wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_SCHEDULED, 1)
	}

	// OpenFor later one probe goes out: the oldest held job. Its success closes the breaker.
	b.Advance(openFor)
	a := assignment(t, w)
	if a.GetJob().GetId() != held[0] || a.GetAttempt() != 1 {
		t.Fatalf("probe is job %d attempt %d, want job %d attempt 1", a.GetJob().GetId(), a.GetAttempt(), held[0])
	}
	if br := breakerOf(t, b, flaky); br.GetState() != stateHalfOpen || br.GetProbesInFlight() != 1 {
		t.Fatalf("with a probe out: %v", br)
	}
	succeed(t, w, a)
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed || br.GetFailuresInWindow() != 0 || br.GetOpenedAt() != nil {
		t.Fatalf("after the probe succeeded: %v", br)
	}

	// The held jobs follow in their order, then the retries whose wait has passed.
	var order []int64
	for range len(held) - 1 + len(tripped) {
		a := assignment(t, w)
		order = append(order, a.GetJob().GetId())
		succeed(t, w, a)
	}
	if !slices.Equal(order[:len(held)-1], held[1:]) {
		t.Fatalf("dispatch order %v, want %v first", order, held[1:])
	}
	rest := slices.Sorted(slices.Values(order[len(held)-1:]))
	if !slices.Equal(rest, tripped) {
		t.Fatalf("dispatch order %v, want the retries %v last", order, tripped)
	}
	for _, id := range held {
		wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1)
	}
	for _, id := range tripped {
		wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 2)
	}
}

func TestBreakerHalfOpenLetsOnlyItsProbesThrough(t *testing.T) {
	t.Parallel()
	c := testBreakerConfig()
	c.HalfOpenProbes, c.CloseAfter = 2, 2
	b := newBreakerBroker(t, c)
	w := b.Connect(brokertest.Hello("w1", 5, flaky, canaryType))
	tripped := trip(t, b, w, 2)
	held := enqueueType(t, b, flaky, 4)

	b.Advance(openFor)
	p1, p2 := assignment(t, w), assignment(t, w)
	if got := []int64{p1.GetJob().GetId(), p2.GetJob().GetId()}; !slices.Equal(got, held[:2]) {
		t.Fatalf("probes are jobs %v, want %v", got, held[:2])
	}
	// w has room for three more, yet the next job it gets is the canary.
	canary(t, b, w)
	gen := breakerOf(t, b, flaky).GetGeneration()
	if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 2, 2, gen)(br) {
		t.Fatalf("with two probes out: %v", br)
	}

	// One success is not enough to close; its slot goes to the next probe.
	succeed(t, w, p1)
	p3 := assignment(t, w)
	if p3.GetJob().GetId() != held[2] {
		t.Fatalf("third probe is job %d, want %d", p3.GetJob().GetId(), held[2])
	}
	if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 2, 2, gen)(br) {
		t.Fatalf("after one probe success: %v", br)
	}

	// The second success closes the breaker and everything else flows.
	succeed(t, w, p2)
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed {
		t.Fatalf("after two probe successes: %v", br)
	}
	got := map[int64]bool{}
	var rest []*jobwirev1.Assignment
	for range 1 + len(tripped) {
		a := assignment(t, w)
		got[a.GetJob().GetId()] = true
		rest = append(rest, a)
	}
	for _, a := range rest {
		succeed(t, w, a)
	}
	succeed(t, w, p3) // a probe of the closed era: its result is simply stale for the breaker
	for _, id := range append([]int64{held[3]}, tripped...) {
		if !got[id] {
			t.Fatalf("job %d not dispatched after closing; got %v", id, got)
		}
	}
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed || br.GetProbesInFlight() != 0 {
		t.Fatalf("at the end: %v", br)
	}
}

func TestBreakerProbeFailureReopens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// fail makes the started probe fail.
		fail func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment)
	}{
		{"transient result", func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) {
			ack(t, w.Fail(a, brokertest.Transient("ConnectionRefused", 0)))
		}},
		{"fatal result", func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) {
			ack(t, w.Fail(a, brokertest.Fatal("ValueError")))
		}},
		{"lease expired", func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) {
			b.Advance(brokertest.DefaultConfig().LeaseDuration)
			if c := w.Next().GetCancel(); c == nil || c.GetJobId() != a.GetJob().GetId() {
				t.Fatalf("expected a cancel of the probe, got %v", c)
			}
		}},
		{"attempt timeout", func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) {
			// The attempt timeout is a minute; heartbeats keep the 30s lease alive past it.
			for range 2 {
				b.Clock.Advance(20 * time.Second)
				w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
					Leases: []*jobwirev1.LeaseRef{{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()}}}}})
				if m := w.Next(); m.GetHeartbeatAck() == nil {
					t.Fatalf("expected a heartbeat ack, got %v", m)
				}
			}
			b.Advance(21 * time.Second)
			if c := w.Next().GetCancel(); c == nil || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_TIMEOUT {
				t.Fatalf("expected a timeout cancel of the probe, got %v", c)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBreakerBroker(t, testBreakerConfig())
			w := b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))
			trip(t, b, w, 2)
			held := make([]int64, 2)
			for i := range held {
				held[i] = enqueue(t, b, &jobwirev1.JobSpec{Type: flaky, AttemptTimeout: durationpb.New(time.Minute)})
			}
			b.Advance(openFor)
			a := assignment(t, w)
			gen := breakerOf(t, b, flaky).GetGeneration()
			w.Started(a)
			b.WaitState(a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_RUNNING)
			tc.fail(t, b, w, a)

			br := breakerOf(t, b, flaky)
			if br.GetState() != stateOpen || br.GetGeneration() != gen+1 || br.GetProbesInFlight() != 0 ||
				!br.GetOpenedAt().AsTime().Equal(b.Clock.Now()) {
				t.Fatalf("after the probe failed at %v: %v", b.Clock.Now(), br)
			}
			canary(t, b, w)
			wantJob(t, b, held[1], jobwirev1.JobState_JOB_STATE_PENDING, 0)

			b.Advance(openFor)
			if a := assignment(t, w); a.GetJob().GetId() != held[1] {
				t.Fatalf("next probe is job %d, want %d", a.GetJob().GetId(), held[1])
			}
		})
	}
}

func TestBreakerSilentProbeFreesItsSlotAfterProbeTimeout(t *testing.T) {
	t.Parallel()
	c := testBreakerConfig()
	c.ProbeTimeout = 10 * time.Second // below the lease, so only the probe timeout can act
	b := newBreakerBroker(t, c)
	w1 := b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))
	trip(t, b, w1, 2)
	held := enqueueType(t, b, flaky, 2)
	b.Advance(openFor)
	p1 := assignment(t, w1)
	w1.Started(p1)
	b.WaitState(p1.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_RUNNING)
	gen := breakerOf(t, b, flaky).GetGeneration()

	w2 := b.Connect(brokertest.Hello("w2", 1, flaky, canaryType))
	canary(t, b, w2) // the one slot is taken: w2 gets no probe

	// Only the breaker's own timer can wake the dispatcher now: no sweep, no new job.
	b.Clock.Advance(c.ProbeTimeout)
	p2 := assignment(t, w2)
	if p2.GetJob().GetId() != held[1] {
		t.Fatalf("second probe is job %d, want %d", p2.GetJob().GetId(), held[1])
	}
	if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 1, 2, gen)(br) {
		t.Fatalf("after the probe timeout: %v", br)
	}

	// The silent probe reports at last: the job succeeds, but its slot was given away, so the
	// breaker does not count it.
	succeed(t, w1, p1)
	if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 1, 2, gen)(br) {
		t.Fatalf("after the timed-out probe reported: %v", br)
	}
	succeed(t, w2, p2)
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed {
		t.Fatalf("after the second probe succeeded: %v", br)
	}
}

// TestBreakerPermitReleasedWhenUserCodeNeverStarted checks every way a probe's job can end
// without user code starting: its permit goes back, counting neither as success nor failure,
// and the next probe is dispatched.
func TestBreakerPermitReleasedWhenUserCodeNeverStarted(t *testing.T) {
	t.Parallel()
	release := func(w *brokertest.RawWorker, a *jobwirev1.Assignment, reason string) {
		w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Release{Release: &jobwirev1.Release{
			JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken(), Reason: reason}}})
	}
	cases := []struct {
		name string
		// free ends the probe's lease without a start. It returns the worker that can take
		// the next probe, and whether the slot stays visibly free meanwhile (no worker with
		// room is left to take it).
		free func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (next func() *brokertest.RawWorker, idle bool)
		// restored: the broker restarts before the next probe, which starts a new probe
		// generation.
		restored bool
		// cancelled: the probe's job itself is cancelled rather than back in line.
		cancelled bool
	}{
		{name: "worker refused the assignment", free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			release(w, a, "not now")
			return func() *brokertest.RawWorker { return w }, false
		}},
		{name: "stream half-closed before Started", free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			w.HalfClose()
			return func() *brokertest.RawWorker { return b.Connect(brokertest.Hello("w2", 1, flaky)) }, true
		}},
		{name: "stream broke before Started", free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			// The job may be running on the worker: its lease is kept until it runs out.
			w.Kill()
			b.WaitStreams(0)
			b.Advance(brokertest.DefaultConfig().LeaseDuration)
			return func() *brokertest.RawWorker { return b.Connect(brokertest.Hello("w2", 1, flaky)) }, true
		}},
		{name: "lease ran out before Started", free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			b.Advance(brokertest.DefaultConfig().LeaseDuration)
			return func() *brokertest.RawWorker { return w }, false
		}},
		{name: "job cancelled while leased", cancelled: true, free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: a.GetJob().GetId()}); err != nil {
				t.Fatalf("cancel: %v", err)
			}
			return func() *brokertest.RawWorker { return w }, false
		}},
		{name: "worker shutting down", free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}})
			release(w, a, "worker shutting down")
			return func() *brokertest.RawWorker {
				w.Kill()
				return b.Connect(brokertest.Hello("w2", 1, flaky))
			}, true
		}},
		{name: "broker shutting down", restored: true, free: func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment) (func() *brokertest.RawWorker, bool) {
			// The worker ignores the broker's drain request, so the broker gives up waiting.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := b.Broker.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			return func() *brokertest.RawWorker { return b.Connect(brokertest.Hello("w2", 1, flaky)) }, true
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBreakerBroker(t, testBreakerConfig())
			w := b.Connect(brokertest.Hello("w1", 1, flaky))
			trip(t, b, w, 2)
			held := enqueueType(t, b, flaky, 2)
			b.Advance(openFor)
			a := assignment(t, w)
			before := breakerOf(t, b, flaky)
			gen := before.GetGeneration()
			if !breakerIs(stateHalfOpen, 1, 2, gen)(before) {
				t.Fatalf("with the probe out: %v", before)
			}

			next, idle := tc.free(t, b, w, a)
			if idle {
				waitBreaker(t, b, flaky, "HALF_OPEN with its slot free", breakerIs(stateHalfOpen, 0, 2, gen))
			}
			if tc.restored {
				// A HALF_OPEN breaker comes back with no probe out, in a new generation.
				b.Restart()
				gen++
				if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 0, 2, gen)(br) {
					t.Fatalf("after the restart: %v", br)
				}
			}
			nw := next()
			p := assignment(t, nw)
			want := held[0]
			if tc.cancelled {
				want = held[1]
				wantJob(t, b, held[0], jobwirev1.JobState_JOB_STATE_CANCELLED, 0)
			}
			if p.GetJob().GetId() != want || p.GetAttempt() != 1 {
				t.Fatalf("next probe is job %d attempt %d, want job %d attempt 1", p.GetJob().GetId(), p.GetAttempt(), want)
			}
			if br := breakerOf(t, b, flaky); !breakerIs(stateHalfOpen, 1, 2, gen)(br) {
				t.Fatalf("with the next probe out: %v", br)
			}
			succeed(t, nw, p)
			if br := breakerOf(t, b, flaky); br.GetState() != stateClosed {
				t.Fatalf("after the next probe succeeded: %v", br)
			}
		})
	}
}

func TestBreakerJobCancelledWhileOpenIsNoProbe(t *testing.T) {
	t.Parallel()
	b := newBreakerBroker(t, testBreakerConfig())
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	trip(t, b, w, 2)
	held := enqueueType(t, b, flaky, 2)
	if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: held[0]}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	b.Advance(openFor)
	if a := assignment(t, w); a.GetJob().GetId() != held[1] {
		t.Fatalf("probe is job %d, want %d", a.GetJob().GetId(), held[1])
	}
	if br := breakerOf(t, b, flaky); br.GetState() != stateHalfOpen || br.GetProbesInFlight() != 1 {
		t.Fatalf("with the probe out: %v", br)
	}
	wantJob(t, b, held[0], jobwirev1.JobState_JOB_STATE_CANCELLED, 0)
}

func TestBreakerOpenSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := newBreakerBroker(t, testBreakerConfig())
	w := b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))
	trip(t, b, w, 2)
	gen := breakerOf(t, b, flaky).GetGeneration()
	b.Advance(10 * time.Second)
	b.Restart()

	br := breakerOf(t, b, flaky)
	if br.GetState() != stateOpen || br.GetGeneration() != gen || br.GetFailuresInWindow() != 2 ||
		!br.GetOpenedAt().AsTime().Equal(brokertest.Start) || !br.GetNextProbeAt().AsTime().Equal(brokertest.Start.Add(openFor)) {
		t.Fatalf("after the restart: %v", br)
	}
	w = b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: flaky})
	canary(t, b, w)
	b.Advance(openFor - 10*time.Second - time.Millisecond)
	canary(t, b, w)
	if br := breakerOf(t, b, flaky); br.GetState() != stateOpen {
		t.Fatalf("just before OpenFor from the original opening: %v", br)
	}
	b.Advance(time.Millisecond)
	if a := assignment(t, w); a.GetJob().GetType() != flaky {
		t.Fatalf("probe is job %d of type %q, want a %s job", a.GetJob().GetId(), a.GetJob().GetType(), flaky)
	}
	wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_PENDING, 0) // the retries are older
	if br := breakerOf(t, b, flaky); br.GetState() != stateHalfOpen || br.GetProbesInFlight() != 1 {
		t.Fatalf("OpenFor after the original opening: %v", br)
	}
}

// TestBreakerFailuresSurviveRestart: failures counted while CLOSED are stored at shutdown, so
// a restart between the threshold's last two failures still opens the breaker at the last.
func TestBreakerFailuresSurviveRestart(t *testing.T) {
	t.Parallel()
	c := testBreakerConfig()
	c.Threshold = 5
	b := newBreakerBroker(t, c)
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	trip(t, b, w, 4)
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed || br.GetFailuresInWindow() != 4 {
		t.Fatalf("after 4 failures: %v", br)
	}
	b.Restart()
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed || br.GetFailuresInWindow() != 4 {
		t.Fatalf("after the restart: %v", br)
	}
	w = b.Connect(brokertest.Hello("w1", 1, flaky))
	trip(t, b, w, 1)
	if br := breakerOf(t, b, flaky); br.GetState() != stateOpen {
		t.Fatalf("after the fifth failure: %v", br)
	}
}

func TestBreakerAdmin(t *testing.T) {
	t.Parallel()
	off := breaker.Config{Disabled: true}
	b := brokertest.New(t, brokertest.Options{Breakers: &broker.BreakerOptions{
		Default: testBreakerConfig(), PerType: map[string]breaker.Config{"unguarded": off}}})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, flaky, canaryType))

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			call func() error
			code codes.Code
		}{
			{"reset without type", func() error {
				_, err := b.Admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{})
				return err
			}, codes.InvalidArgument},
			{"force without state", func() error {
				_, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: flaky})
				return err
			}, codes.InvalidArgument},
			{"reset a disabled breaker", func() error {
				_, err := b.Admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: "unguarded"})
				return err
			}, codes.FailedPrecondition},
			{"force a disabled breaker", func() error {
				_, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "unguarded", State: stateOpen})
				return err
			}, codes.FailedPrecondition},
		} {
			if got := status.Code(tc.call()); got != tc.code {
				t.Errorf("%s: code %s, want %s", tc.name, got, tc.code)
			}
		}
	})

	// Force OPEN holds the type back, from now.
	b.Advance(time.Minute)
	forced, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: flaky, State: stateOpen})
	if err != nil {
		t.Fatalf("force open: %v", err)
	}
	now := b.Clock.Now()
	if br := forced.GetBreaker(); br.GetType() != flaky || br.GetState() != stateOpen ||
		!br.GetOpenedAt().AsTime().Equal(now) || !br.GetNextProbeAt().AsTime().Equal(now.Add(openFor)) {
		t.Fatalf("force open answered %v", br)
	}
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: flaky})
	canary(t, b, w)
	wantJob(t, b, id, jobwirev1.JobState_JOB_STATE_PENDING, 0)

	// Every breaker is listed, sorted by type, the disabled one as CLOSED and marked disabled.
	var types []string
	for _, br := range listBreakers(t, b) {
		types = append(types, br.GetType())
		if got, want := br.GetDisabled(), br.GetType() == "unguarded"; got != want {
			t.Fatalf("%s listed with disabled=%v, want %v", br.GetType(), got, want)
		}
	}
	if want := []string{canaryType, flaky, "unguarded"}; !slices.Equal(types, want) {
		t.Fatalf("listed %v, want %v", types, want)
	}

	// Reset closes it and the held job goes out.
	reset, err := b.Admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: flaky})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	if br := reset.GetBreaker(); br.GetState() != stateClosed || br.GetOpenedAt() != nil || br.GetNextProbeAt() != nil || br.GetFailuresInWindow() != 0 {
		t.Fatalf("reset answered %v", br)
	}
	a := assignment(t, w)
	if a.GetJob().GetId() != id {
		t.Fatalf("after reset, assigned job %d, want %d", a.GetJob().GetId(), id)
	}

	// A failure is counted; Force HALF_OPEN lets one probe through at once.
	w.Started(a)
	ack(t, w.Fail(a, brokertest.Transient("ConnectionRefused", 0)))
	if br := breakerOf(t, b, flaky); br.GetState() != stateClosed || br.GetFailuresInWindow() != 1 {
		t.Fatalf("after one failure: %v", br)
	}
	forced, err = b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: flaky, State: stateHalfOpen})
	if err != nil {
		t.Fatalf("force half-open: %v", err)
	}
	if br := forced.GetBreaker(); br.GetState() != stateHalfOpen || !br.GetNextProbeAt().AsTime().Equal(now) || br.GetProbesInFlight() != 0 {
		t.Fatalf("force half-open answered %v", br)
	}
	ids := enqueueType(t, b, flaky, 2)
	if a := assignment(t, w); a.GetJob().GetId() != ids[0] {
		t.Fatalf("probe is job %d, want %d", a.GetJob().GetId(), ids[0])
	}
	if br := breakerOf(t, b, flaky); br.GetState() != stateHalfOpen || br.GetProbesInFlight() != 1 {
		t.Fatalf("with the probe out: %v", br)
	}
}
