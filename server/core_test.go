package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/retry"
)

func enqueue(t *testing.T, b *brokertest.Bundle, spec *jobwirev1.JobSpec) int64 {
	t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.GetJob().GetId()
}

func getJob(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Job {
	t.Helper()
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return res.GetJob()
}

func ack(t *testing.T, m *jobwirev1.ConnectResponse) *jobwirev1.ResultAck {
	t.Helper()
	a := m.GetResultAck()
	if a == nil {
		t.Fatalf("expected a result ack, got %v", m)
	}
	return a
}

func TestSuccess(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "email"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "email", Payload: []byte(`{"to":"ü@example.com"}`)})
	a := w.Assignment()
	if a.GetJob().GetId() != id || string(a.GetJob().GetPayload()) != `{"to":"ü@example.com"}` || a.GetAttempt() != 1 {
		t.Fatalf("assignment = %v", a)
	}
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_LEASED || j.GetAttempts() != 0 {
		t.Fatalf("after assignment: state %s attempts %d, want LEASED and 0", j.GetState(), j.GetAttempts())
	}
	w.Started(a)
	r := ack(t, w.Succeed(a))
	if r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision = %s", r.GetDecision())
	}
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempts() != 1 || len(j.GetAttemptHistory()) != 1 {
		t.Fatalf("job = %v", j)
	}
	h := j.GetAttemptHistory()[0]
	if h.GetWorkerId() != "w1" || h.GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED {
		t.Fatalf("attempt = %v", h)
	}
}

func TestFatalGoesDeadAfterOneAttempt(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Fatal("ValueError")))
	if r.GetDecision() != jobwirev1.Decision_DECISION_DEAD || r.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_FATAL {
		t.Fatalf("ack = %v", r)
	}
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_DEAD || j.GetAttempts() != 1 || j.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_FATAL {
		t.Fatalf("job = %v", j)
	}
	h := j.GetAttemptHistory()
	if len(h) != 1 || h[0].GetErrorType() != "ValueError" || h[0].GetFailureKind() != jobwirev1.FailureKind_FAILURE_KIND_FATAL || h[0].GetDetails() != "stack..." {
		t.Fatalf("history = %v", h)
	}
}

func TestTransientTwiceThenSuccess(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	for attempt := int32(1); attempt <= 2; attempt++ {
		a := w.Assignment()
		if a.GetAttempt() != attempt {
			t.Fatalf("attempt = %d, want %d", a.GetAttempt(), attempt)
		}
		w.Started(a)
		r := ack(t, w.Fail(a, brokertest.Transient("TimeoutError", 0)))
		if r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
			t.Fatalf("decision = %s", r.GetDecision())
		}
		b.WaitState(id, jobwirev1.JobState_JOB_STATE_SCHEDULED)
		b.Clock.Advance(r.GetRetryAt().AsTime().Sub(b.Clock.Now()))
	}
	a := w.Assignment()
	w.Started(a)
	ack(t, w.Succeed(a))
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempts() != 3 || len(j.GetAttemptHistory()) != 3 {
		t.Fatalf("job = %v", j)
	}
}

// With the defaults, a job that always fails transiently runs four times, waits the seeds'
// formula between runs (jitter drawn from the seeded source), then goes to the DLQ.
func TestTransientUntilExhausted(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	policy := retry.DefaultPolicy()
	jitter := brokertest.NewRand()
	for attempt := 1; attempt <= 4; attempt++ {
		a := w.Assignment()
		w.Started(a)
		r := ack(t, w.Fail(a, brokertest.Transient("ConnectionError", 0)))
		if attempt == 4 {
			if r.GetDecision() != jobwirev1.Decision_DECISION_DEAD || r.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED {
				t.Fatalf("last ack = %v", r)
			}
			break
		}
		want := policy.Delay(attempt, jitter.Float64())
		if got := r.GetRetryAt().AsTime().Sub(b.Clock.Now()); got != want {
			t.Fatalf("wait after attempt %d = %s, want %s", attempt, got, want)
		}
		// One nanosecond early the job must still wait.
		b.Clock.Advance(want - time.Nanosecond)
		if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED {
			t.Fatalf("before its time the job is %s", j.GetState())
		}
		b.Clock.Advance(time.Nanosecond)
	}
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_DEAD || j.GetAttempts() != 4 || len(j.GetAttemptHistory()) != 4 {
		t.Fatalf("job = %v", j)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Transient("RateLimited", 90*time.Second)))
	if got := r.GetRetryAt().AsTime().Sub(b.Clock.Now()); got != 90*time.Second {
		t.Fatalf("retry in %s, want 90s", got)
	}
}

func TestAlwaysFatalErrorTypes(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.AlwaysFatal = []string{"NullReferenceError"}
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Transient("NullReferenceError", 0)))
	if r.GetDecision() != jobwirev1.Decision_DECISION_DEAD || r.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_FATAL {
		t.Fatalf("ack = %v", r)
	}
	if h := getJob(t, b, id).GetAttemptHistory(); h[0].GetFailureKind() != jobwirev1.FailureKind_FAILURE_KIND_FATAL {
		t.Fatalf("recorded kind = %s, want FATAL", h[0].GetFailureKind())
	}
}

func TestRetryLifetimeExpiry(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	// The job waits 23h59m59s for a worker; a retry 3s+ after its first failure would start
	// after its 24h lifetime.
	b.Clock.Advance(24*time.Hour - time.Second)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Transient("ConnectionError", 0)))
	if r.GetDecision() != jobwirev1.Decision_DECISION_DEAD || r.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_RETRY_LIFETIME_EXPIRED {
		t.Fatalf("ack = %v", r)
	}
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_DEAD)
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	spec := &jobwirev1.JobSpec{Type: "t", IdempotencyKey: "order-17"}
	first, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	if first.GetJob().GetDuplicate() || !second.GetJob().GetDuplicate() || first.GetJob().GetId() != second.GetJob().GetId() {
		t.Fatalf("first = %v, second = %v", first.GetJob(), second.GetJob())
	}
}

func TestEnqueueBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
		{Type: "a"}, {Type: "b", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetJobs()) != 2 || res.GetJobs()[1].GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED {
		t.Fatalf("batch = %v", res.GetJobs())
	}
	// One bad spec refuses the whole batch: nothing is stored.
	_, err = b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{{Type: "c"}, {Type: ""}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad batch: %v", err)
	}
	if _, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: res.GetJobs()[1].GetId() + 1}); status.Code(err) != codes.NotFound {
		t.Fatalf("a job of the refused batch exists: %v", err)
	}
}

// tokenOf reads an assignment's lease token, failing the test if it is not one.
func tokenOf(t *testing.T, a *jobwirev1.Assignment) job.LeaseToken {
	t.Helper()
	tok, err := job.ParseLeaseToken(a.GetLeaseToken())
	if err != nil {
		t.Fatalf("assignment of job %d: lease token %q: %v", a.GetJob().GetId(), a.GetLeaseToken(), err)
	}
	return tok
}

func TestStaleFencingTokenRefused(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	cur := tokenOf(t, a)
	earlier, guessed := cur, cur
	earlier.Seq--            // the lease before this one, as an integer token would have been
	guessed.Secret[0] ^= 0x1 // the right number with a wrong secret
	for _, tok := range []string{earlier.String(), guessed.String(), "", "1", "not a token", a.GetLeaseToken() + "0"} {
		stale := &jobwirev1.Assignment{Job: a.GetJob(), LeaseToken: tok}
		for name, send := range map[string]func() *jobwirev1.ConnectResponse{
			"result": func() *jobwirev1.ConnectResponse { return w.Succeed(stale) },
			"heartbeat": func() *jobwirev1.ConnectResponse {
				w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
					Leases: []*jobwirev1.LeaseRef{{JobId: id, LeaseToken: stale.GetLeaseToken()}}}}})
				return w.Next()
			},
		} {
			m := send()
			r := m.GetRefused()
			if r == nil || codes.Code(r.GetCode()) != codes.FailedPrecondition || r.GetJobId() != id {
				t.Fatalf("%s with token %q: got %v, want refused FAILED_PRECONDITION", name, tok, m)
			}
		}
	}
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_RUNNING || j.GetAttempts() != 1 {
		t.Fatalf("stale messages changed the job: %v", j)
	}
	ack(t, w.Succeed(a))
}

func TestRunningJobOfKilledWorkerRetriedAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w1 := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w1.Assignment()
	w1.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	w1.Kill()
	w2 := b.Connect(brokertest.Hello("w2", 1, "t"))
	// The lease is still valid: w1 might come back. Past it, the attempt counts as failed.
	b.Advance(29 * time.Second)
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("before lease expiry the job is %s", j.GetState())
	}
	b.Advance(time.Second)
	j := b.WaitState(id, jobwirev1.JobState_JOB_STATE_SCHEDULED)
	h := j.GetAttemptHistory()
	if len(h) != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED || h[0].GetWorkerId() != "w1" {
		t.Fatalf("history = %v", h)
	}
	b.Clock.Advance(5 * time.Second)
	a2 := w2.Assignment()
	if a2.GetJob().GetId() != id || a2.GetAttempt() != 2 || tokenOf(t, a2).Seq <= tokenOf(t, a).Seq {
		t.Fatalf("retry assignment = %v", a2)
	}
	w2.Started(a2)
	ack(t, w2.Succeed(a2))
}

// A job sent to a worker whose stream broke before its Started arrived may be running there: it
// keeps its lease, and comes back without an attempt spent once that runs out.
func TestLeasedButNeverStartedComesBackWithoutAnAttempt(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w1 := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	w1.Assignment()
	w1.Kill()
	b.WaitStreams(0)
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_LEASED {
		t.Fatalf("job %d is %s once the stream ended, want LEASED until its lease runs out", id, j.GetState())
	}
	b.Advance(brokertest.DefaultConfig().LeaseDuration)
	j := b.WaitState(id, jobwirev1.JobState_JOB_STATE_PENDING)
	if j.GetAttempts() != 0 || len(j.GetAttemptHistory()) != 0 {
		t.Fatalf("an attempt was burned: %v", j)
	}
	w2 := b.Connect(brokertest.Hello("w2", 1, "t"))
	if a := w2.Assignment(); a.GetAttempt() != 1 {
		t.Fatalf("attempt = %d, want 1", a.GetAttempt())
	}
}

func TestLeaseExpiryOfLeasedJobBurnsNoAttempt(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 2, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	b.Advance(30 * time.Second) // no Started, no heartbeat
	if m := w.Assignment(); m.GetJob().GetId() != id || m.GetAttempt() != 1 || m.GetLeaseToken() == a.GetLeaseToken() {
		t.Fatalf("re-assignment = %v", m)
	}
}

func TestHeartbeatsKeepALongJobAlive(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	for range 6 { // a minute of work, heartbeating every 10s
		b.Advance(10 * time.Second)
		w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
			Leases: []*jobwirev1.LeaseRef{{JobId: id, LeaseToken: a.GetLeaseToken()}}}}})
		if hb := w.Next().GetHeartbeatAck(); len(hb.GetExtended()) != 1 {
			t.Fatalf("heartbeat ack = %v", hb)
		}
	}
	ack(t, w.Succeed(a))
}

func TestAttemptTimeoutCancelsAndRetries(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", AttemptTimeout: durationpb.New(20 * time.Second)})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	b.Advance(15 * time.Second)
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
		Leases: []*jobwirev1.LeaseRef{{JobId: id, LeaseToken: a.GetLeaseToken()}}}}})
	w.Next() // heartbeat ack
	b.Advance(5 * time.Second)
	c := w.Next().GetCancel()
	if c.GetJobId() != id || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_TIMEOUT {
		t.Fatalf("cancel = %v", c)
	}
	j := getJob(t, b, id)
	if j.GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED || j.GetAttemptHistory()[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_TIMEOUT {
		t.Fatalf("job = %v", j)
	}
	// The worker's late result is refused and changes nothing.
	if r := w.Succeed(a).GetRefused(); codes.Code(r.GetCode()) != codes.FailedPrecondition {
		t.Fatalf("late result: %v", r)
	}
}

func TestReconnectedWorkerDeliversResult(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w1 := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w1.Assignment()
	w1.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	w1.Kill()
	hello := brokertest.Hello("w1", 2, "t")
	hello.Held = []*jobwirev1.LeaseRef{{JobId: id, LeaseToken: a.GetLeaseToken()}, {JobId: 999, LeaseToken: "1.00000000000000000000000000000001"}}
	w2 := b.Connect(hello)
	if lost := w2.Welcome.GetLost(); len(lost) != 1 || lost[0].GetJobId() != 999 {
		t.Fatalf("lost = %v", lost)
	}
	if r := ack(t, w2.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("ack = %v", r)
	}
}

func TestFlowControl(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 2, "t"))
	for range 5 {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	}
	a1, a2 := w.Assignment(), w.Assignment()
	// Holding two of two, the worker gets nothing more until it frees a slot. A heartbeat's
	// answer arrives after anything the broker had queued before it.
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
		Leases: []*jobwirev1.LeaseRef{{JobId: a1.GetJob().GetId(), LeaseToken: a1.GetLeaseToken()}}}}})
	if m := w.Next(); m.GetHeartbeatAck() == nil {
		t.Fatalf("a worker holding its capacity got %v", m)
	}
	w.Started(a1)
	ack(t, w.Succeed(a1))
	a3 := w.Assignment()
	if a3.GetJob().GetId() == a2.GetJob().GetId() {
		t.Fatal("the same job was assigned twice")
	}
}

func TestDispatchOrder(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	// A run_at in the past counts as now, so the job with the older run_at is the one whose
	// delay ended first, though it was enqueued after the other one.
	low := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Priority: 1, Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(2 * time.Second)}})
	high := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Priority: 10})
	later := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Priority: 100, Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)}})
	_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t", Priority: 1,
		Schedule: &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(b.Clock.Now().Add(time.Second))}}})
	if err != nil {
		t.Fatal(err)
	}
	older := getJob(t, b, high+2).GetId()
	b.Clock.Advance(2 * time.Second)
	b.WaitState(low, jobwirev1.JobState_JOB_STATE_PENDING)
	b.WaitState(older, jobwirev1.JobState_JOB_STATE_PENDING)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	var order []int64
	for range 3 {
		a := w.Assignment()
		order = append(order, a.GetJob().GetId())
		ack(t, w.Succeed(a))
	}
	// Highest priority first, then oldest run_at; the scheduled job waits for its time.
	if want := []int64{high, older, low}; order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("order = %v, want %v", order, want)
	}
	b.Clock.Advance(time.Minute)
	if a := w.Assignment(); a.GetJob().GetId() != later {
		t.Fatalf("got job %d, want the scheduled one %d", a.GetJob().GetId(), later)
	}
}

func TestOnlyMatchingTypesAndQueues(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	enqueue(t, b, &jobwirev1.JobSpec{Type: "other"})
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "slow"})
	want := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "fast"})
	hello := brokertest.Hello("w1", 5, "t")
	hello.Queues = []string{"fast"}
	w := b.Connect(hello)
	a := w.Assignment()
	if a.GetJob().GetId() != want {
		t.Fatalf("got job %d, want %d", a.GetJob().GetId(), want)
	}
	ack(t, w.Succeed(a))
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	pending := enqueue(t, b, &jobwirev1.JobSpec{Type: "other"})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	res, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: id})
	if err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", res, err)
	}
	if c := w.Next().GetCancel(); c.GetJobId() != id || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_REQUESTED {
		t.Fatalf("cancel message = %v", c)
	}
	if r := w.Succeed(a).GetRefused(); codes.Code(r.GetCode()) != codes.FailedPrecondition {
		t.Fatalf("result after cancel: %v", r)
	}
	if res, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: pending}); err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("cancel pending: %v %v", res, err)
	}
}

func TestBrokerRestartLosesNoJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 2, "t"))
	running := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	leased := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	pending := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	scheduled := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}})
	a1, a2 := w.Assignment(), w.Assignment()
	if a1.GetJob().GetId() != running || a2.GetJob().GetId() != leased {
		t.Fatalf("assignments %d %d", a1.GetJob().GetId(), a2.GetJob().GetId())
	}
	w.Started(a1)
	b.WaitState(running, jobwirev1.JobState_JOB_STATE_RUNNING)
	w.Kill()
	b.Restart()

	// The worker comes back holding the running job and delivers its result.
	hello := brokertest.Hello("w1", 3, "t")
	hello.Held = []*jobwirev1.LeaseRef{{JobId: running, LeaseToken: a1.GetLeaseToken()}}
	w2 := b.Connect(hello)
	got := map[int64]bool{}
	var as []*jobwirev1.Assignment
	for range 2 {
		a := w2.Assignment()
		got[a.GetJob().GetId()] = true
		if a.GetAttempt() != 1 {
			t.Fatalf("job %d attempt %d after restart, want 1", a.GetJob().GetId(), a.GetAttempt())
		}
		as = append(as, a)
	}
	for _, a := range as {
		ack(t, w2.Succeed(a))
	}
	if !got[leased] || !got[pending] {
		t.Fatalf("after restart got %v, want %d and %d", got, leased, pending)
	}
	ack(t, w2.Succeed(a1))
	b.Clock.Advance(time.Hour)
	ack(t, w2.Succeed(w2.Assignment()))
	for _, id := range []int64{running, leased, pending, scheduled} {
		b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	}
}

// A worker that frees its only slot gets the next waiting job even though the last dispatch
// round, which it had no room in, found nothing more for another worker.
func TestFreedCapacityTakesWaitingJobs(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	busy := b.Connect(brokertest.Hello("busy", 1, "t"))
	first := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	second := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := busy.Assignment()
	if a.GetJob().GetId() != first {
		t.Fatalf("got job %d, want %d", a.GetJob().GetId(), first)
	}
	// Another worker drains its own type while the first one is full.
	other := b.Connect(brokertest.Hello("other", 4, "u"))
	ack(t, other.Succeed(func() *jobwirev1.Assignment {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "u"})
		return other.Assignment()
	}()))
	ack(t, busy.Succeed(a))
	if a := busy.Assignment(); a.GetJob().GetId() != second {
		t.Fatalf("got job %d, want the waiting %d", a.GetJob().GetId(), second)
	}
}
