package brokertest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// WaitTimeout bounds how long a test waits for the broker to answer. It is a safety net
// against hangs, not a timing assertion: generous, so that a race-enabled run on two loaded
// cores (a thousand jobs through one worker took over 10 s beside two CPU hogs) still passes.
const WaitTimeout = 30 * time.Second

// WaitFor polls cond until it holds, failing t after WaitTimeout. It is for work of the
// broker's own goroutines: a timer of the fake clock fires only when the test advances it.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", WaitTimeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// RawWorker speaks the worker protocol message by message, so tests can check each rule.
type RawWorker struct {
	t       testing.TB
	stream  jobwirev1.WorkerService_ConnectClient
	cancel  context.CancelFunc
	recv    chan *jobwirev1.ConnectResponse
	done    chan error
	Welcome *jobwirev1.Welcome
}

// Connect opens a stream, sends hello and waits for the welcome.
func (b *Bundle) Connect(hello *jobwirev1.Hello) *RawWorker {
	b.t.Helper()
	w, err := b.ConnectOn(b.Workers, hello)
	if err != nil {
		b.t.Fatalf("connect: %v", err)
	}
	return w
}

// ConnectOn opens a stream through client (a connection of its own, say with another token),
// sends hello and waits for the welcome. It returns the stream's error when the broker ends the
// stream instead of welcoming the worker.
func (b *Bundle) ConnectOn(client jobwirev1.WorkerServiceClient, hello *jobwirev1.Hello) (*RawWorker, error) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Connect(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &RawWorker{t: b.t, stream: stream, cancel: cancel, recv: make(chan *jobwirev1.ConnectResponse, 1024), done: make(chan error, 1)}
	b.t.Cleanup(w.Kill)
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		_, err = stream.Recv() // the broker's reason, if it ended the stream
		return nil, err
	}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				w.done <- err
				close(w.recv)
				return
			}
			w.recv <- m
		}
	}()
	select {
	case m, ok := <-w.recv:
		if !ok {
			return nil, <-w.done
		}
		if w.Welcome = m.GetWelcome(); w.Welcome == nil {
			b.t.Fatalf("first message from the broker is not welcome: %v", m)
		}
		return w, nil
	case <-time.After(WaitTimeout):
		b.t.Fatalf("no welcome from the broker within %s", WaitTimeout)
	}
	return nil, nil
}

// Err waits for the stream to end and returns why.
func (w *RawWorker) Err() error {
	w.t.Helper()
	deadline := time.After(WaitTimeout)
	for {
		select {
		case _, ok := <-w.recv:
			if !ok {
				return <-w.done
			}
		case <-deadline:
			w.t.Fatalf("the stream did not end within %s", WaitTimeout)
			return nil
		}
	}
}

// Hello is a hello for worker id serving types with capacity.
func Hello(id string, capacity int32, types ...string) *jobwirev1.Hello {
	return &jobwirev1.Hello{WorkerId: id, JobTypes: types, Capacity: capacity}
}

// Send sends one message.
func (w *RawWorker) Send(m *jobwirev1.ConnectRequest) {
	w.t.Helper()
	if err := w.stream.Send(m); err != nil {
		w.t.Fatalf("send: %v", err)
	}
}

// Next waits for the broker's next message.
func (w *RawWorker) Next() *jobwirev1.ConnectResponse {
	w.t.Helper()
	select {
	case m, ok := <-w.recv:
		if !ok {
			w.t.Fatalf("stream ended: %v", <-w.done)
		}
		return m
	case <-time.After(WaitTimeout):
		w.t.Fatalf("no message from the broker within %s", WaitTimeout)
	}
	return nil
}

// Assignment waits for the next assignment.
func (w *RawWorker) Assignment() *jobwirev1.Assignment {
	w.t.Helper()
	m := w.Next()
	a := m.GetAssignment()
	if a == nil {
		w.t.Fatalf("expected an assignment, got %v", m)
	}
	return a
}

// Ref is the lease an assignment hands out.
func Ref(a *jobwirev1.Assignment) *jobwirev1.LeaseRef {
	return &jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()}
}

// Started reports that user code started.
func (w *RawWorker) Started(a *jobwirev1.Assignment) { w.StartedRef(Ref(a)) }

// StartedRef reports that user code started under ref, current or not.
func (w *RawWorker) StartedRef(ref *jobwirev1.LeaseRef) { w.Send(StartedMsg(ref)) }

// StartedMsg is the message that reports user code started under ref, to send alone or in a
// batch.
func StartedMsg(ref *jobwirev1.LeaseRef) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken()}}}
}

// Succeed reports success and returns the broker's answer.
func (w *RawWorker) Succeed(a *jobwirev1.Assignment) *jobwirev1.ConnectResponse {
	w.t.Helper()
	return w.Report(Ref(a), nil)
}

// Fail reports a failure and returns the broker's answer.
func (w *RawWorker) Fail(a *jobwirev1.Assignment, f *jobwirev1.Failure) *jobwirev1.ConnectResponse {
	w.t.Helper()
	return w.Report(Ref(a), f)
}

// Report sends the result of ref's attempt (f nil: success) and returns the broker's answer.
func (w *RawWorker) Report(ref *jobwirev1.LeaseRef, f *jobwirev1.Failure) *jobwirev1.ConnectResponse {
	w.t.Helper()
	w.SendResult(ref, f)
	return w.Next()
}

// SendResult sends the result of ref's attempt (f nil: success) without waiting for an answer.
func (w *RawWorker) SendResult(ref *jobwirev1.LeaseRef, f *jobwirev1.Failure) {
	w.t.Helper()
	w.Send(ResultMsg(ref, f))
}

// ResultMsg is the message that reports the result of ref's attempt (f nil: success), to send
// alone or in a batch.
func ResultMsg(ref *jobwirev1.LeaseRef, f *jobwirev1.Failure) *jobwirev1.ConnectRequest {
	if f == nil {
		return SuccessMsg(ref, nil)
	}
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Outcome: &jobwirev1.Result_Failure{Failure: f}}}}
}

// SuccessMsg is the message that reports the success of ref's attempt with result (nil: none),
// to send alone or in a batch.
func SuccessMsg(ref *jobwirev1.LeaseRef, result []byte) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: &jobwirev1.Result{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(),
		Outcome: &jobwirev1.Result_Success{Success: &jobwirev1.Success{Result: result}}}}}
}

// Heartbeat asks to extend refs and returns the broker's answer.
func (w *RawWorker) Heartbeat(refs ...*jobwirev1.LeaseRef) *jobwirev1.ConnectResponse {
	w.t.Helper()
	w.Send(HeartbeatMsg(refs...))
	return w.Next()
}

// HeartbeatMsg is the message that asks to extend refs, to send alone or in a batch.
func HeartbeatMsg(refs ...*jobwirev1.LeaseRef) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{Leases: refs}}}
}

// Release hands ref's job back without running it.
func (w *RawWorker) Release(ref *jobwirev1.LeaseRef) {
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Release{Release: &jobwirev1.Release{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Reason: "test"}}})
}

// Transient is a transient failure, with an optional retry-after.
func Transient(errorType string, retryAfter time.Duration) *jobwirev1.Failure {
	f := &jobwirev1.Failure{Kind: jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT, ErrorType: errorType, Message: "dependency unavailable"}
	if retryAfter > 0 {
		f.RetryAfter = durationpb.New(retryAfter)
	}
	return f
}

// Fatal is a fatal failure.
func Fatal(errorType string) *jobwirev1.Failure {
	return &jobwirev1.Failure{Kind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, ErrorType: errorType, Message: "bad payload", Details: "stack..."}
}

// HalfClose ends the worker's side of the stream (gRPC CloseSend), as a worker that is done.
func (w *RawWorker) HalfClose() {
	w.t.Helper()
	if err := w.stream.CloseSend(); err != nil {
		w.t.Fatalf("close send: %v", err)
	}
}

// Kill ends the stream abruptly, as a killed worker process would.
func (w *RawWorker) Kill() { w.cancel() }

// Poll returns the broker's next message if one has arrived, without waiting: a test driving
// several workers at once reads each in turn.
func (w *RawWorker) Poll() (*jobwirev1.ConnectResponse, bool) {
	select {
	case m, ok := <-w.recv:
		return m, ok
	default:
		return nil, false
	}
}
