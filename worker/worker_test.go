package worker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "missing id", opts: Options{}, want: "Options.ID"},
		{name: "long id", opts: Options{ID: strings.Repeat("x", 256)}, want: "Options.ID"},
		{name: "negative concurrency", opts: Options{ID: "w", Concurrency: -1}, want: "Options.Concurrency"},
		{name: "huge concurrency", opts: Options{ID: "w", Concurrency: 10001}, want: "Options.Concurrency"},
		{name: "negative grace", opts: Options{ID: "w", ShutdownGrace: -time.Second}, want: "Options.ShutdownGrace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(fakeConn{}, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one naming %s", err, tt.want)
			}
		})
	}
	if _, err := New(nil, Options{ID: "w"}); err == nil {
		t.Error("New(nil conn) succeeded")
	}
}

func TestRunWithoutHandlers(t *testing.T) {
	t.Parallel()
	w, err := New(fakeConn{}, Options{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(t.Context()); err == nil {
		t.Error("Run without handlers succeeded")
	}
}

func TestHelloAnnouncesTheWorker(t *testing.T) {
	t.Parallel()
	tb := setup(t, Options{ID: "mailer-1", Queues: []string{"mail", "sms"}, Concurrency: 3})
	tb.worker.Handle("sms.send", func(context.Context, *Job) error { return nil })
	tb.worker.Handle("email.send", func(context.Context, *Job) error { return nil })
	tb.start(t)

	bs, hello := tb.stream(t)
	want := &jobwirev1.Hello{WorkerId: "mailer-1", JobTypes: []string{"email.send", "sms.send"}, Queues: []string{"mail", "sms"}, Capacity: 3, AcceptsBatches: true}
	if !proto.Equal(hello, want) {
		t.Errorf("Hello = %v, want %v", hello, want)
	}
	bs.welcome()
	tb.shutdown(t, bs)
}

func TestSuccessStartedThenResult(t *testing.T) {
	t.Parallel()
	tb := setup(t, Options{})
	g := newGate()
	tb.worker.Handle("email.send", g.handle(false))
	tb.start(t)
	bs := tb.connect(t)

	ref := bs.assignWith(&jobwirev1.Assignment{
		Job: &jobwirev1.Job{
			Id: 1, Type: "email.send", Queue: "mail", Payload: []byte(`{"to":"a@b"}`), Priority: 3,
			MaxAttempts: 5, IdempotencyKey: "k1",
		},
		Attempt:        2,
		LeaseToken:     "7.0123456789abcdef0123456789abcdef",
		AttemptTimeout: durationpb.New(time.Hour),
	})
	// Started is on the wire while user code is still blocked.
	bs.started(ref)
	j := g.waitEntered(t)
	want := Job{ID: 1, Type: "email.send", Queue: "mail", Payload: []byte(`{"to":"a@b"}`), Priority: 3,
		Attempt: 2, MaxAttempts: 5, IdempotencyKey: "k1", AttemptTimeout: time.Hour, LeaseToken: "7.0123456789abcdef0123456789abcdef"}
	got := *j
	got.out = nil // what the job reports goes to the worker, not compared here
	if !reflect.DeepEqual(got, want) {
		t.Errorf("handler got %+v, want %+v", got, want)
	}
	g.proceed <- nil
	if r := bs.result(ref); r.GetSuccess() == nil {
		t.Errorf("result = %v, want success", r)
	}
	bs.ack(ref)
	tb.shutdown(t, bs)
}

func TestFailureResults(t *testing.T) {
	t.Parallel()
	type emailArgs struct {
		To string `json:"to"`
	}
	tests := []struct {
		name       string
		payload    string
		handler    HandlerFunc
		wantKind   jobwirev1.FailureKind
		wantType   string
		wantMsg    string
		wantRetry  time.Duration
		wantDetail string
	}{
		{
			name:     "transient",
			handler:  func(context.Context, *Job) error { return fmt.Errorf("smtp: %w", &quotaError{service: "smtp"}) },
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT, wantType: "*worker.quotaError", wantMsg: "smtp: smtp: quota exceeded",
		},
		{
			name:     "fatal",
			handler:  func(context.Context, *Job) error { return Fatal(errors.New("no such customer")) },
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, wantType: "error", wantMsg: "no such customer",
		},
		{
			name:     "retry after",
			handler:  func(context.Context, *Job) error { return RetryAfter(errors.New("429"), 90*time.Second) },
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT, wantType: "error", wantMsg: "429", wantRetry: 90 * time.Second,
		},
		{
			name:     "unsupported",
			handler:  func(context.Context, *Job) error { return fmt.Errorf("resize: %w", errors.ErrUnsupported) },
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, wantType: "errors.ErrUnsupported", wantMsg: "resize: unsupported operation",
		},
		{
			name: "panic",
			handler: func(context.Context, *Job) error {
				var m map[string]int
				m["x"] = 1
				return nil
			},
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, wantType: "panic", wantMsg: "panic: assignment to entry in nil map",
			wantDetail: "worker_test.go",
		},
		{
			name:    "bad json payload",
			payload: `{"to":`,
			handler: func() HandlerFunc {
				w := &Worker{handlers: map[string]HandlerFunc{}}
				HandleJSON(w, "t", func(context.Context, *Job, emailArgs) error { return nil })
				return w.handlers["t"]
			}(),
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, wantType: "*json.SyntaxError",
			wantMsg: "decode t payload: unexpected end of JSON input",
		},
		{
			name:    "wrong json type",
			payload: `{"to":5}`,
			handler: func() HandlerFunc {
				w := &Worker{handlers: map[string]HandlerFunc{}}
				HandleJSON(w, "t", func(context.Context, *Job, emailArgs) error { return nil })
				return w.handlers["t"]
			}(),
			wantKind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, wantType: "*json.UnmarshalTypeError",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb, bs := setupHandling(t, tt.handler)
			ref := bs.assign(1, "job", tt.payload)
			bs.started(ref)
			f := bs.result(ref).GetFailure()
			if f == nil {
				t.Fatal("result is not a failure")
			}
			if f.GetKind() != tt.wantKind || f.GetErrorType() != tt.wantType {
				t.Errorf("failure kind/type = %v %q, want %v %q", f.GetKind(), f.GetErrorType(), tt.wantKind, tt.wantType)
			}
			if tt.wantMsg != "" && f.GetMessage() != tt.wantMsg {
				t.Errorf("message = %q, want %q", f.GetMessage(), tt.wantMsg)
			}
			if got := f.GetRetryAfter().AsDuration(); f.GetRetryAfter() != nil && got != tt.wantRetry || f.GetRetryAfter() == nil && tt.wantRetry != 0 {
				t.Errorf("retry_after = %v, want %v", f.GetRetryAfter(), tt.wantRetry)
			}
			if !strings.Contains(f.GetDetails(), tt.wantDetail) {
				t.Errorf("details = %q, want them to contain %q", f.GetDetails(), tt.wantDetail)
			}
			bs.ack(ref)
			tb.shutdown(t, bs)
		})
	}
}

func TestHandleJSONDecodesArgs(t *testing.T) {
	t.Parallel()
	type emailArgs struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	tb := setup(t, Options{})
	got := make(chan emailArgs, 2)
	HandleJSON(tb.worker, "email.send", func(_ context.Context, _ *Job, args emailArgs) error {
		got <- args
		return nil
	})
	tb.start(t)
	bs := tb.connect(t)

	for _, tc := range []struct {
		payload string
		want    emailArgs
	}{
		{payload: `{"to":"a@b","subject":"hi"}`, want: emailArgs{To: "a@b", Subject: "hi"}},
		{payload: ``, want: emailArgs{}},
	} {
		ref := bs.assign(1, "email.send", tc.payload)
		bs.started(ref)
		if r := bs.result(ref); r.GetSuccess() == nil {
			t.Errorf("payload %q: result %v, want success", tc.payload, r)
		}
		if a := <-got; a != tc.want {
			t.Errorf("payload %q decoded to %+v, want %+v", tc.payload, a, tc.want)
		}
		bs.ack(ref)
	}
	tb.shutdown(t, bs)
}

func TestResultResentAfterRefusedUnavailable(t *testing.T) {
	t.Parallel()
	tb, bs := setupHandling(t, func(context.Context, *Job) error { return nil })

	ref := bs.assign(1, "job", "")
	bs.started(ref)
	first := bs.result(ref)
	bs.refuse(ref, jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT, codes.Unavailable)
	if again := bs.result(ref); !proto.Equal(first, again) {
		t.Errorf("re-sent result %v differs from %v", again, first)
	}
	bs.ack(ref)
	tb.shutdown(t, bs)
}

func TestResultResentOnNewStream(t *testing.T) {
	t.Parallel()
	tb, bs := setupHandling(t, func(context.Context, *Job) error { return errors.New("boom") })

	ref := bs.assign(1, "job", "")
	bs.started(ref)
	first := bs.result(ref)
	bs.kill(codes.Unavailable)

	bs2 := tb.reconnectHolding(t, ref)
	bs2.welcome()
	// Started was already written, so only the result is replayed.
	if again := bs2.result(ref); !proto.Equal(first, again) {
		t.Errorf("replayed result %v differs from %v", again, first)
	}
	bs2.ack(ref)
	tb.shutdown(t, bs2)
}

func TestRefusedFailedPreconditionDropsResult(t *testing.T) {
	t.Parallel()
	tb, bs := setupHandling(t, func(context.Context, *Job) error { return nil })

	ref := bs.assign(1, "job", "")
	bs.started(ref)
	bs.result(ref)
	bs.refuse(ref, jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT, codes.FailedPrecondition)
	// Nothing is held any more, so the worker drains and leaves without sending the result again.
	tb.shutdown(t, bs)
}

func TestCancelReachesHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reason jobwirev1.CancelReason
		want   error
	}{
		{reason: jobwirev1.CancelReason_CANCEL_REASON_REQUESTED, want: ErrJobCancelled},
		{reason: jobwirev1.CancelReason_CANCEL_REASON_TIMEOUT, want: ErrAttemptTimeout},
		{reason: jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST, want: ErrLeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.reason.String(), func(t *testing.T) {
			t.Parallel()
			tb, bs, g := setupGated(t)

			ref := bs.running(g)
			bs.cancelJob(ref, tt.reason)
			if cause := g.waitCause(t); !errors.Is(cause, tt.want) {
				t.Errorf("cause = %v, want %v", cause, tt.want)
			}
			// The broker recorded the outcome already: no result follows.
			tb.shutdown(t, bs)
		})
	}
}

func TestAttemptTimeoutCancelsHandler(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.assignWith(&jobwirev1.Assignment{
		Job:            &jobwirev1.Job{Id: 1, Type: "job"},
		AttemptTimeout: durationpb.New(time.Millisecond),
	})
	bs.started(ref)
	if cause := g.waitCause(t); !errors.Is(cause, ErrAttemptTimeout) {
		t.Errorf("cause = %v, want ErrAttemptTimeout", cause)
	}
	f := bs.result(ref).GetFailure()
	if f.GetKind() != jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT || !strings.Contains(f.GetMessage(), "deadline exceeded") || !f.GetTimedOut() {
		t.Errorf("failure = %v, want a transient deadline failure marked timed_out", f)
	}
	bs.ack(ref)
	tb.shutdown(t, bs)
}

func TestHeartbeatsHeldLeases(t *testing.T) {
	t.Parallel()
	tb := setup(t, Options{})
	g1, g2 := newGate(), newGate()
	tb.worker.Handle("one", g1.handle(false))
	tb.worker.Handle("two", g2.handle(false))
	tb.start(t)
	bs := tb.connect(t)

	ref1 := bs.assign(1, "one", "")
	bs.started(ref1)
	ref2 := bs.assign(2, "two", "")
	bs.started(ref2)

	tb.clock.Advance(testHeartbeat)
	if hb := bs.heartbeat(); !slices.EqualFunc(hb.GetLeases(), []*jobwirev1.LeaseRef{ref1, ref2}, leaseEqual) {
		t.Errorf("heartbeat = %v, want leases of jobs 1 and 2", hb.GetLeases())
	}

	// A stale lease is refused: its handler is cancelled and it is not heartbeated again.
	bs.refuse(ref1, jobwirev1.RefusedMessage_REFUSED_MESSAGE_HEARTBEAT, codes.FailedPrecondition)
	if cause := g1.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	tb.clock.Advance(testHeartbeat)
	if hb := bs.heartbeat(); !slices.EqualFunc(hb.GetLeases(), []*jobwirev1.LeaseRef{ref2}, leaseEqual) {
		t.Errorf("heartbeat = %v, want only job 2's lease", hb.GetLeases())
	}

	g2.proceed <- nil
	bs.result(ref2)
	bs.ack(ref2)
	tb.shutdown(t, bs)
}

func leaseEqual(a, b *jobwirev1.LeaseRef) bool { return proto.Equal(a, b) }

func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	tb := setup(t, Options{Concurrency: 2})
	var running, peak atomic.Int32
	gates := map[string]*gate{"one": newGate(), "two": newGate(), "three": newGate()}
	for name, g := range gates {
		h := g.handle(name == "one") // job one ignores cancellation, like a stuck handler
		tb.worker.Handle(name, func(ctx context.Context, j *Job) error {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			return h(ctx, j)
		})
	}
	slotWaits := make(chan int64, 10)
	tb.worker.hooks.slotWait = func(id int64) { slotWaits <- id }
	tb.start(t)
	bs := tb.connect(t)

	ref1 := bs.assign(1, "one", "")
	bs.started(ref1)
	ref2 := bs.assign(2, "two", "")
	bs.started(ref2)
	gates["one"].waitEntered(t)
	gates["two"].waitEntered(t)

	// The broker frees job 1's slot on Cancel, but its handler keeps running: job 3 must wait.
	bs.cancelJob(ref1, jobwirev1.CancelReason_CANCEL_REASON_REQUESTED)
	ref3 := bs.assign(3, "three", "")
	select {
	case id := <-slotWaits:
		if id != 3 {
			t.Fatalf("job %d waited for a slot, want job 3", id)
		}
	case <-time.After(waitLimit):
		t.Fatal("job 3 did not wait for a slot")
	}
	select {
	case <-gates["three"].entered:
		t.Fatal("job 3 started while two handlers were running")
	default:
	}

	// Held leases (2 and 3) fill the capacity: an extra assignment is handed back.
	ref4 := bs.assign(4, "two", "")
	if r := bs.release(ref4); !strings.Contains(r.GetReason(), "capacity") {
		t.Errorf("release reason = %q, want one about capacity", r.GetReason())
	}

	gates["one"].proceed <- nil
	bs.started(ref3)
	gates["three"].waitEntered(t)
	if p := peak.Load(); p > 2 {
		t.Errorf("%d handlers ran at once, want at most 2", p)
	}
	gates["two"].proceed <- nil
	bs.result(ref2)
	bs.ack(ref2)
	gates["three"].proceed <- nil
	bs.result(ref3)
	bs.ack(ref3)
	tb.shutdown(t, bs)
}

func TestUnknownJobTypeReleased(t *testing.T) {
	t.Parallel()
	tb, bs := setupHandling(t, func(context.Context, *Job) error { return nil })

	ref := bs.assign(1, "nope", "")
	if r := bs.release(ref); !strings.Contains(r.GetReason(), "nope") {
		t.Errorf("release reason = %q, want it to name the job type", r.GetReason())
	}
	tb.shutdown(t, bs)
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref1 := bs.assign(1, "job", "")
	bs.started(ref1)
	g.waitEntered(t)

	tb.cancel()
	bs.drain()
	// An assignment already in flight when Drain was sent is handed back unstarted.
	ref2 := bs.assign(2, "job", "")
	if r := bs.release(ref2); r.GetReason() != "worker shutting down" {
		t.Errorf("release reason = %q", r.GetReason())
	}
	select {
	case err := <-tb.runErr:
		t.Fatalf("Run returned %v while a job was running", err)
	default:
	}
	g.proceed <- nil
	if r := bs.result(ref1); r.GetSuccess() == nil {
		t.Errorf("result = %v, want success", r)
	}
	bs.ack(ref1)
	bs.expectClosed()
	tb.expectRunReturned(t, codes.OK)
}

// slotHeldByCancelledJob sets up a worker with one slot whose job 1 (type "stuck") was
// cancelled but whose handler still runs, ignoring its context, and whose job 2 (type "other")
// waits for that slot.
func slotHeldByCancelledJob(t *testing.T) (tb *testBundle, bs *brokerStream, stuck, other *gate, ref2 *jobwirev1.LeaseRef) {
	t.Helper()
	tb = setup(t, Options{Concurrency: 1})
	stuck, other = newGate(), newGate()
	tb.worker.Handle("stuck", stuck.handle(true))
	tb.worker.Handle("other", other.handle(false))
	slotWaits := make(chan int64, 10)
	tb.worker.hooks.slotWait = func(id int64) { slotWaits <- id }
	tb.start(t)
	bs = tb.connect(t)

	ref1 := bs.assign(1, "stuck", "")
	bs.started(ref1)
	stuck.waitEntered(t)
	bs.cancelJob(ref1, jobwirev1.CancelReason_CANCEL_REASON_REQUESTED)
	ref2 = bs.assign(2, "other", "")
	<-slotWaits
	return tb, bs, stuck, other, ref2
}

func TestShutdownReleasesJobsWaitingForASlot(t *testing.T) {
	t.Parallel()
	tb, bs, stuck, other, ref2 := slotHeldByCancelledJob(t)

	tb.cancel()
	bs.drain()
	if r := bs.release(ref2); r.GetReason() != "worker shutting down" {
		t.Errorf("release reason = %q", r.GetReason())
	}
	stuck.proceed <- nil
	bs.expectClosed()
	tb.expectRunReturned(t, codes.OK)
	select {
	case <-other.entered:
		t.Error("a released job ran")
	default:
	}
}

func TestShutdownGraceCancelsRunningHandlers(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	tb.cancel()
	bs.drain()
	<-tb.stopped
	tb.clock.Advance(testGrace)
	if cause := g.waitCause(t); !errors.Is(cause, ErrShutdown) {
		t.Errorf("cause = %v, want ErrShutdown", cause)
	}
	if f := bs.result(ref).GetFailure(); f == nil {
		t.Error("want a failure result for the cancelled handler")
	}
	bs.ack(ref)
	bs.expectClosed()
	tb.expectRunReturned(t, codes.OK)
}

// A broker that rejects the worker's reconnect (its token revoked, say) ends the worker: its
// running handlers are cancelled, and Run returns once they have, not when the grace runs out
// (the fake clock never reaches it here).
func TestRejectedReconnectReturnsOnceHandlersDo(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	bs.running(g)
	bs.kill(codes.Unavailable)
	bs2, _ := tb.stream(t)
	bs2.kill(codes.PermissionDenied)
	if cause := g.waitCause(t); !errors.Is(cause, ErrShutdown) {
		t.Errorf("cause = %v, want ErrShutdown", cause)
	}
	tb.expectRunReturned(t, codes.PermissionDenied)
}

func TestShutdownGivesUpAfterTwiceTheGrace(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	tb.cancel()
	bs.drain()
	<-tb.stopped
	tb.clock.Advance(testGrace)
	bs.result(ref) // never acknowledged
	tb.clock.Advance(testGrace)
	err := tb.expectRunReturned(t, codes.Unknown)
	if !strings.Contains(err.Error(), "1 jobs unsettled") {
		t.Errorf("Run error = %v, want it to count the unsettled job", err)
	}
}

func TestLostLeaseOnReconnect(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	bs.kill(codes.Unavailable)

	bs2 := tb.reconnectHolding(t, ref)
	bs2.welcome(ref)
	if cause := g.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	// The lost job's result is dropped.
	tb.shutdown(t, bs2)
}

func TestStartedResentAfterRefusedUnavailable(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	// The broker could not store Started: it is sent again.
	ref := bs.assign(1, "job", "")
	bs.started(ref)
	bs.refuse(ref, jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED, codes.Unavailable)
	bs.started(ref)
	g.proceed <- nil
	bs.result(ref)
	bs.ack(ref)
	tb.shutdown(t, bs)
}

// A Started written just before the stream broke may never have been read: the next stream
// sends it again for a job that still runs, so the broker that adopts the lease counts the
// attempt.
func TestStartedResentOnNewStreamWhileRunning(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	bs.kill(codes.Unavailable)

	bs2 := tb.reconnectHolding(t, ref)
	bs2.welcome()
	bs2.started(ref)
	g.proceed <- nil
	bs2.result(ref)
	bs2.ack(ref)
	tb.shutdown(t, bs2)
}

func TestStartedRefusedAsStaleCancelsHandler(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.assign(1, "job", "")
	bs.started(ref)
	bs.refuse(ref, jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED, codes.FailedPrecondition)
	if cause := g.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	tb.shutdown(t, bs)
}

func TestSessionErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code      codes.Code
		permanent bool
	}{
		{code: codes.InvalidArgument, permanent: true},
		{code: codes.Unimplemented, permanent: true},
		{code: codes.Unavailable},
		{code: codes.Internal},
		{code: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			t.Parallel()
			tb := setup(t, Options{})
			tb.worker.Handle("job", func(context.Context, *Job) error { return nil })
			tb.start(t)
			bs, _ := tb.stream(t)
			bs.kill(tt.code)
			if tt.permanent {
				tb.expectRunReturned(t, tt.code)
				return
			}
			bs2, _ := tb.stream(t)
			bs2.welcome()
			tb.shutdown(t, bs2)
		})
	}
}

func TestBrokerDrainRequest(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref1 := bs.assign(1, "job", "")
	bs.started(ref1)
	g.waitEntered(t)
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Drain{Drain: &jobwirev1.DrainRequest{Reason: "restart"}}})
	ref2 := bs.assign(2, "job", "")
	if r := bs.release(ref2); r.GetReason() != "broker draining" {
		t.Errorf("release reason = %q", r.GetReason())
	}
	g.proceed <- nil
	bs.result(ref1)
	bs.ack(ref1)
	// With nothing held the worker leaves the stream and connects again.
	bs.expectClosed()
	bs2, hello := tb.stream(t)
	if len(hello.GetHeld()) != 0 {
		t.Errorf("Hello.held = %v, want none", hello.GetHeld())
	}
	bs2.welcome()
	tb.shutdown(t, bs2)
}

func TestHandlePanicsOnMisuse(t *testing.T) {
	t.Parallel()
	w, err := New(fakeConn{}, Options{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("a", func(context.Context, *Job) error { return nil })
	for name, f := range map[string]func(){
		"empty type": func() { w.Handle("", func(context.Context, *Job) error { return nil }) },
		"nil fn":     func() { w.Handle("b", nil) },
		"duplicate":  func() { w.Handle("a", func(context.Context, *Job) error { return nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Handle did not panic", name)
				}
			}()
			f()
		}()
	}
}

// fakeConn satisfies New for tests that never connect.
type fakeConn struct{}

func (fakeConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return errors.New("fakeConn: not connected")
}

func (fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("fakeConn: not connected")
}

func TestStartedReplayedWhenUserCodeStartedBetweenStreams(t *testing.T) {
	t.Parallel()
	// Job 2 waits for the slot of a cancelled job whose handler is still running.
	tb, bs, stuck, g, ref2 := slotHeldByCancelledJob(t)

	// The stream breaks; job 2 gets its slot while the next stream has no Welcome yet.
	bs.kill(codes.Unavailable)
	bs2 := tb.reconnectHolding(t, ref2)
	stuck.proceed <- nil
	g.waitEntered(t)
	bs2.welcome()
	bs2.started(ref2)
	g.proceed <- nil
	bs2.result(ref2)
	bs2.ack(ref2)
	tb.shutdown(t, bs2)
}

// A batch frame from the broker is handled as its messages one by one, in order: each job of a
// batch of assignments runs and is answered, and an acknowledgement in a later batch ends it.
func TestBatchFromBrokerIsHandledInOrder(t *testing.T) {
	t.Parallel()
	tb := setup(t, Options{Concurrency: 4})
	tb.worker.Handle("email.send", func(context.Context, *Job) error { return nil })
	tb.start(t)
	bs := tb.connect(t)

	var assignments []*jobwirev1.ConnectResponse
	var refs []*jobwirev1.LeaseRef
	for id := int64(1); id <= 3; id++ {
		a := &jobwirev1.Assignment{Job: &jobwirev1.Job{Id: id, Type: "email.send", Queue: "default", MaxAttempts: 1},
			Attempt: 1, LeaseToken: fmt.Sprintf("1.%032x", 100+id)}
		assignments = append(assignments, &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Assignment{Assignment: a}})
		refs = append(refs, &jobwirev1.LeaseRef{JobId: id, LeaseToken: a.LeaseToken})
	}
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Batch{
		Batch: &jobwirev1.ConnectResponseBatch{Messages: assignments}}})

	// Each job's Started comes before its Result; jobs may interleave.
	started, done := map[int64]bool{}, map[int64]bool{}
	for range 2 * len(refs) {
		switch m := bs.next(); {
		case m.GetStarted() != nil:
			started[m.GetStarted().GetJobId()] = true
		case m.GetResult().GetSuccess() != nil:
			id := m.GetResult().GetJobId()
			if !started[id] {
				t.Errorf("job %d: Result before Started", id)
			}
			done[id] = true
		default:
			t.Fatalf("got %v, want a Started or a successful Result", m)
		}
	}
	if len(done) != len(refs) {
		t.Fatalf("results for jobs %v, want 1-3", done)
	}
	acks := make([]*jobwirev1.ConnectResponse, len(refs))
	for i, ref := range refs {
		acks[i] = &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_ResultAck{ResultAck: &jobwirev1.ResultAck{
			JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Decision: jobwirev1.Decision_DECISION_SUCCEEDED}}}
	}
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Batch{
		Batch: &jobwirev1.ConnectResponseBatch{Messages: acks}}})
	// Acknowledged, the jobs are no longer held: the worker drains with nothing to hand back.
	tb.shutdown(t, bs)
}
