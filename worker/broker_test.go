package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// waitLimit bounds every wait in these tests; it is a failure deadline, never a pacing delay.
const waitLimit = 10 * time.Second

const (
	testHeartbeat = 10 * time.Second
	testGrace     = 4 * time.Second // shorter than testHeartbeat, so advancing by it sends no heartbeat
)

// scriptedBroker is a WorkerService whose every stream is driven by the test.
type scriptedBroker struct {
	jobwirev1.UnimplementedWorkerServiceServer
	streams chan *brokerStream
}

// brokerStream is one Connect call as the broker sees it. Only the test goroutine sends on it.
type brokerStream struct {
	t      *testing.T
	srv    grpc.BidiStreamingServer[jobwirev1.ConnectRequest, jobwirev1.ConnectResponse]
	in     chan *jobwirev1.ConnectRequest
	closed chan struct{} // the worker half-closed the stream, or it broke
	end    chan error
}

func (b *scriptedBroker) Connect(srv grpc.BidiStreamingServer[jobwirev1.ConnectRequest, jobwirev1.ConnectResponse]) error {
	bs := &brokerStream{
		srv:    srv,
		in:     make(chan *jobwirev1.ConnectRequest, 1000),
		closed: make(chan struct{}),
		end:    make(chan error, 1),
	}
	go func() {
		defer close(bs.closed)
		for {
			m, err := srv.Recv()
			if err != nil {
				return
			}
			b := m.GetBatch()
			if b == nil {
				bs.in <- m
				continue
			}
			// A batch is only packing: the test sees its messages one by one, after checking
			// that the worker kept the rules a broker enforces.
			if n := len(b.GetMessages()); n < 1 || n > maxBatch {
				bs.in <- &jobwirev1.ConnectRequest{} // an empty message fails the test's expectation
				return
			}
			for _, inner := range b.GetMessages() {
				if !batchable(inner) {
					bs.in <- &jobwirev1.ConnectRequest{}
					return
				}
				bs.in <- inner
			}
		}
	}()
	select {
	case b.streams <- bs:
	case <-srv.Context().Done():
		return srv.Context().Err()
	}
	select {
	case err := <-bs.end:
		return err
	case <-bs.closed:
		return nil
	case <-srv.Context().Done():
		return srv.Context().Err()
	}
}

type testBundle struct {
	broker  *scriptedBroker
	clock   *clock.Fake
	worker  *Worker
	cancel  context.CancelFunc
	runErr  chan error
	stopped chan struct{} // closed when shutdown timers are armed
}

// setup starts a scripted broker on loopback and builds a worker for it with a fake clock and
// zero reconnect delays. opts fields left zero get test defaults.
func setup(t *testing.T, opts Options) *testBundle {
	t.Helper()
	return setupOn(t, opts, func(addr string) (grpc.ClientConnInterface, func() error, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		return conn, conn.Close, nil
	})
}

// setupOn is setup with the worker's connection to the broker at addr made by dial.
func setupOn(t *testing.T, opts Options, dial func(addr string) (grpc.ClientConnInterface, func() error, error)) *testBundle {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	broker := &scriptedBroker{streams: make(chan *brokerStream, 10)}
	gs := grpc.NewServer()
	jobwirev1.RegisterWorkerServiceServer(gs, broker)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	conn, closeConn, err := dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeConn() })

	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if opts.ID == "" {
		opts.ID = "w1"
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = testGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ReconnectBackoff.Rand == nil {
		opts.ReconnectBackoff.Rand = func() float64 { return 0 }
	}
	opts.Clock = fake
	w, err := New(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBundle{broker: broker, clock: fake, worker: w, runErr: make(chan error, 1), stopped: make(chan struct{})}
	var once sync.Once
	w.hooks.shutdownStarted = func() { once.Do(func() { close(tb.stopped) }) }
	return tb
}

// start runs the worker. If the test leaves it running, cleanup forces the shutdown through by
// cutting the broker and running out the grace.
func (tb *testBundle) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.cancel = cancel
	done := make(chan struct{})
	go func() {
		defer close(done)
		tb.runErr <- tb.worker.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
			return
		case <-tb.stopped:
		case <-time.After(waitLimit):
			t.Error("shutdown did not start")
			return
		}
		tb.clock.Advance(2*testGrace + closeWait)
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after the shutdown grace ran out")
		}
	})
}

// stream waits for the worker's next stream and checks its Hello.
func (tb *testBundle) stream(t *testing.T) (*brokerStream, *jobwirev1.Hello) {
	t.Helper()
	select {
	case bs := <-tb.broker.streams:
		bs.t = t
		m := bs.next()
		h := m.GetHello()
		if h == nil {
			t.Fatalf("first message = %v, want Hello", m)
		}
		return bs, h
	case <-time.After(waitLimit):
		t.Fatal("worker did not connect")
		return nil, nil
	}
}

// connect waits for the next stream and welcomes it.
func (tb *testBundle) connect(t *testing.T, lost ...*jobwirev1.LeaseRef) *brokerStream {
	t.Helper()
	bs, _ := tb.stream(t)
	bs.welcome(lost...)
	return bs
}

// shutdown cancels Run and checks the worker drains, closes the stream and returns nil.
func (tb *testBundle) shutdown(t *testing.T, bs *brokerStream) {
	t.Helper()
	tb.cancel()
	bs.drain()
	bs.expectClosed()
	tb.expectRunReturned(t, codes.OK)
}

func (tb *testBundle) expectRunReturned(t *testing.T, want codes.Code) error {
	t.Helper()
	select {
	case err := <-tb.runErr:
		if want == codes.OK && err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
		if want != codes.OK && status.Code(err) != want {
			t.Fatalf("Run returned %v, want code %v", err, want)
		}
		return err
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
		return nil
	}
}

func (bs *brokerStream) next() *jobwirev1.ConnectRequest {
	bs.t.Helper()
	select {
	case m := <-bs.in:
		return m
	case <-bs.closed:
		select {
		case m := <-bs.in:
			return m
		default:
			bs.t.Fatal("stream closed, want a message")
		}
	case <-time.After(waitLimit):
		bs.t.Fatal("no message from the worker")
	}
	return nil
}

// expectClosed waits for the worker to end the stream, with no message before the end.
func (bs *brokerStream) expectClosed() {
	bs.t.Helper()
	select {
	case m := <-bs.in:
		bs.t.Fatalf("got %v, want the stream to close", m)
	case <-bs.closed:
		select {
		case m := <-bs.in:
			bs.t.Fatalf("got %v, want the stream to close", m)
		default:
		}
	case <-time.After(waitLimit):
		bs.t.Fatal("worker did not close the stream")
	}
}

func (bs *brokerStream) send(m *jobwirev1.ConnectResponse) {
	bs.t.Helper()
	if err := bs.srv.Send(m); err != nil && err != io.EOF {
		bs.t.Fatalf("send %v: %v", m, err)
	}
}

// kill ends the stream with a gRPC status.
func (bs *brokerStream) kill(code codes.Code) {
	bs.end <- status.Error(code, "scripted failure")
}

func (bs *brokerStream) welcome(lost ...*jobwirev1.LeaseRef) {
	bs.t.Helper()
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Welcome{Welcome: &jobwirev1.Welcome{
		SessionId:         "s1",
		LeaseDuration:     durationpb.New(3 * testHeartbeat),
		HeartbeatInterval: durationpb.New(testHeartbeat),
		Lost:              lost,
	}}})
}

// assign sends an Assignment with lease token 100+id.
func (bs *brokerStream) assign(id int64, jobType string, payload string) *jobwirev1.LeaseRef {
	bs.t.Helper()
	return bs.assignWith(&jobwirev1.Assignment{
		Job:     &jobwirev1.Job{Id: id, Type: jobType, Queue: "default", Payload: []byte(payload), MaxAttempts: 5},
		Attempt: 1,
	})
}

func (bs *brokerStream) assignWith(a *jobwirev1.Assignment) *jobwirev1.LeaseRef {
	bs.t.Helper()
	if a.LeaseToken == "" {
		a.LeaseToken = fmt.Sprintf("1.%032x", 100+a.GetJob().GetId())
	}
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Assignment{Assignment: a}})
	return &jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.LeaseToken}
}

func (bs *brokerStream) ack(ref *jobwirev1.LeaseRef) {
	bs.t.Helper()
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_ResultAck{ResultAck: &jobwirev1.ResultAck{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Decision: jobwirev1.Decision_DECISION_SUCCEEDED,
	}}})
}

func (bs *brokerStream) refuse(ref *jobwirev1.LeaseRef, what jobwirev1.RefusedMessage, code codes.Code) {
	bs.t.Helper()
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Refused{Refused: &jobwirev1.Refused{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), RefusedMessage: what, Code: uint32(code), Message: "scripted",
	}}})
}

func (bs *brokerStream) cancelJob(ref *jobwirev1.LeaseRef, reason jobwirev1.CancelReason) {
	bs.t.Helper()
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Cancel{Cancel: &jobwirev1.Cancel{
		JobId: ref.GetJobId(), LeaseToken: ref.GetLeaseToken(), Reason: reason,
	}}})
}

func (bs *brokerStream) started(ref *jobwirev1.LeaseRef) {
	bs.t.Helper()
	m := bs.next()
	s := m.GetStarted()
	if s == nil || s.GetJobId() != ref.GetJobId() || s.GetLeaseToken() != ref.GetLeaseToken() {
		bs.t.Fatalf("got %v, want Started for %v", m, ref)
	}
}

func (bs *brokerStream) result(ref *jobwirev1.LeaseRef) *jobwirev1.Result {
	bs.t.Helper()
	m := bs.next()
	r := m.GetResult()
	if r == nil || r.GetJobId() != ref.GetJobId() || r.GetLeaseToken() != ref.GetLeaseToken() {
		bs.t.Fatalf("got %v, want Result for %v", m, ref)
	}
	return r
}

func (bs *brokerStream) release(ref *jobwirev1.LeaseRef) *jobwirev1.Release {
	bs.t.Helper()
	m := bs.next()
	r := m.GetRelease()
	if r == nil || r.GetJobId() != ref.GetJobId() || r.GetLeaseToken() != ref.GetLeaseToken() {
		bs.t.Fatalf("got %v, want Release for %v", m, ref)
	}
	return r
}

func (bs *brokerStream) heartbeat() *jobwirev1.Heartbeat {
	bs.t.Helper()
	m := bs.next()
	h := m.GetHeartbeat()
	if h == nil {
		bs.t.Fatalf("got %v, want Heartbeat", m)
	}
	return h
}

func (bs *brokerStream) drain() {
	bs.t.Helper()
	if m := bs.next(); m.GetDrain() == nil {
		bs.t.Fatalf("got %v, want Drain", m)
	}
}

// gate is a handler that reports when it starts and runs until told to return.
type gate struct {
	entered chan *Job
	causes  chan error
	proceed chan error
}

// setupGated starts a worker with default options whose one handler, for type "job", waits
// at a gate, and connects it to the scripted broker.
func setupGated(t *testing.T) (*testBundle, *brokerStream, *gate) {
	t.Helper()
	g := newGate()
	tb, bs := setupHandling(t, g.handle(false))
	return tb, bs, g
}

// setupHandling starts a worker with default options that runs h for the type "job", and
// returns it with its first stream.
func setupHandling(t *testing.T, h HandlerFunc) (*testBundle, *brokerStream) {
	t.Helper()
	tb := setup(t, Options{})
	tb.worker.Handle("job", h)
	tb.start(t)
	return tb, tb.connect(t)
}

// running assigns job 1, of the type "job", on bs and returns its lease once the worker has
// sent Started for it and g's handler runs it.
func (bs *brokerStream) running(g *gate) *jobwirev1.LeaseRef {
	bs.t.Helper()
	ref := bs.assign(1, "job", "")
	bs.started(ref)
	g.waitEntered(bs.t)
	return ref
}

// reconnectHolding waits for the worker's next stream and checks that its Hello lists held,
// in order, as the leases it still holds.
func (tb *testBundle) reconnectHolding(t *testing.T, held ...*jobwirev1.LeaseRef) *brokerStream {
	t.Helper()
	bs, hello := tb.stream(t)
	got := hello.GetHeld()
	if len(got) != len(held) {
		t.Fatalf("Hello.held = %v, want %v", got, held)
	}
	for i := range held {
		if !proto.Equal(got[i], held[i]) {
			t.Fatalf("Hello.held = %v, want %v", got, held)
		}
	}
	return bs
}

func newGate() *gate {
	return &gate{entered: make(chan *Job, 10), causes: make(chan error, 10), proceed: make(chan error, 10)}
}

// handle waits for proceed; if ignoreCancel is false it also returns when ctx ends, reporting
// context.Cause.
func (g *gate) handle(ignoreCancel bool) HandlerFunc {
	return func(ctx context.Context, j *Job) error {
		g.entered <- j
		if ignoreCancel {
			return <-g.proceed
		}
		select {
		case err := <-g.proceed:
			return err
		case <-ctx.Done():
			g.causes <- context.Cause(ctx)
			return ctx.Err()
		}
	}
}

func (g *gate) waitEntered(t *testing.T) *Job {
	t.Helper()
	select {
	case j := <-g.entered:
		return j
	case <-time.After(waitLimit):
		t.Fatal("handler did not start")
		return nil
	}
}

func (g *gate) waitCause(t *testing.T) error {
	t.Helper()
	select {
	case err := <-g.causes:
		return err
	case <-time.After(waitLimit):
		t.Fatal("handler context was not cancelled")
		return nil
	}
}
