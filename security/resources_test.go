package security

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// A worker that never reads its stream once pinned everything sent to it in memory. Now a
// session with 4 MiB waiting gets no more jobs, and one whose messages have waited longer than a
// lease lasts is disconnected with RESOURCE_EXHAUSTED; its never-started jobs go to workers
// that read.
func TestNonReadingWorkerIsDisconnected(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{Limits: withStreamLimits(0, 1)})
	// The stream's context is a safety net only: 24 MiB go through the broker first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*brokertest.WaitTimeout)
	defer cancel()
	stream, err := b.Workers.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{
		Hello: brokertest.Hello("sloth", 10000, "t")}}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("x"), 1<<20)
	const jobs = 24 // 24 MiB of assignments, far more than a stream may have waiting
	var ids []int64
	for range jobs {
		ids = append(ids, enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t", Payload: payload}))
	}
	// The sloth holds at most about two rounds' worth (what its send loop took, and what waits):
	// the rest stays PENDING.
	pending := 0
	for _, id := range ids {
		res, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetJob().GetState() == jobwirev1.JobState_JOB_STATE_PENDING {
			pending++
		}
	}
	if pending < jobs-12 {
		t.Fatalf("only %d of %d jobs are still pending: the non-reading worker was handed the rest", pending, jobs)
	}
	// A lease's time later, the sweep finds its messages still waiting and closes the stream.
	// The broker serves one worker stream here, so a reader gets in only once the sloth's is
	// gone; the sloth must not read meanwhile.
	b.Advance(brokertest.DefaultConfig().LeaseDuration + time.Second)
	var reader *brokertest.RawWorker
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for reader == nil {
		reader, err = b.ConnectOn(b.Workers, brokertest.Hello("reader", jobs, "t"))
		if status.Code(err) != codes.ResourceExhausted && err != nil || time.Now().After(deadline) {
			t.Fatalf("waiting for the sloth's stream to close: %v", err)
		}
		// A round that queued more for the sloth may have come after that sweep: the next
		// sweeps see it.
		b.Advance(time.Second)
	}
	var got error
	for got == nil {
		_, got = stream.Recv()
	}
	if status.Code(got) != codes.ResourceExhausted || !strings.Contains(got.Error(), "not reading") {
		t.Fatalf("the non-reading stream ended with %v, want RESOURCE_EXHAUSTED", got)
	}
	for range jobs {
		a := reader.Assignment()
		if len(a.GetJob().GetPayload()) != len(payload) {
			t.Fatalf("job %d came back without its payload", a.GetJob().GetId())
		}
	}
}

// A Failure may carry megabytes of text; the broker keeps a bounded prefix of each field with a
// marker, and GetJob of a job with any number of attempts fits in a response.
func TestOversizedFailures(t *testing.T) {
	t.Parallel()
	// No breaker: a hundred failures in a row would open it and hold the retries back.
	off := breaker.CountConfig()
	off.Disabled = true
	b := brokertest.New(t, brokertest.Options{Breakers: &broker.BreakerOptions{Default: off}})
	w := b.Connect(brokertest.Hello("w", 1, "t"))
	id := enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 1000})
	huge := strings.Repeat("é", 1<<19) // 1 MiB of two-byte characters
	const attempts = 105
	for i := range attempts {
		a := w.Assignment()
		w.Started(a)
		f := brokertest.Transient("E", time.Millisecond)
		if i < 3 {
			f.ErrorType, f.Message, f.Details = huge, huge, huge
		}
		if m := w.Fail(a, f); m.GetResultAck() == nil {
			t.Fatalf("attempt %d: failure not acknowledged: %v", i+1, m)
		}
		b.Advance(2 * time.Second) // past the retry-after and its jitter
	}
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatalf("GetJob of a job with %d large failures: %v", attempts, err)
	}
	j := res.GetJob()
	if n := len(j.GetAttemptHistory()); n != 100 || j.GetAttemptsOmitted() != attempts-100 {
		t.Fatalf("history holds %d attempts and omits %d; want the newest 100 and %d omitted", n, j.GetAttemptsOmitted(), attempts-100)
	}
	// The oldest attempts kept include big ones only if few enough were omitted; read them
	// straight from the store to check the stored bounds.
	full, err := b.Broker.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	first := full.History[0]
	for name, f := range map[string]struct {
		got   string
		limit int
	}{"error_type": {first.ErrorType, 256}, "message": {first.Message, 2048}, "details": {first.Details, 8192}} {
		if len(f.got) > f.limit || !strings.HasSuffix(f.got, "bytes truncated]") || !strings.HasPrefix(f.got, "é") {
			t.Errorf("%s stored as %d bytes (%q...), want at most %d ending in the marker", name, len(f.got), f.got[:min(20, len(f.got))], f.limit)
		}
	}
}

// Idle connections are closed (MaxConnectionIdle); they once stayed open forever.
func TestIdleConnectionsClosed(t *testing.T) {
	t.Parallel()
	tr := server.DefaultTransport()
	tr.MaxConnectionIdle = 100 * time.Millisecond
	b := brokertest.New(t, brokertest.Options{Transport: tr})
	conn, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the idle connection is still %s after %s", s, brokertest.WaitTimeout)
		}
	}
}

// Past MaxConnections a new connection is not accepted until an open one closes, so sockets
// opened by one client cannot grow the broker's memory without bound.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	tr := server.DefaultTransport()
	tr.MaxConnections = 2
	b := brokertest.New(t, brokertest.Options{Transport: tr})
	health := func(conn *grpc.ClientConn, wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// The bundle's own connection is the first, one more fills the limit.
	if err := health(b.Conn, brokertest.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	second := dial()
	if err := health(second, brokertest.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	third := dial()
	if err := health(third, 300*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third connection with a limit of 2: %v, want it left waiting (DEADLINE_EXCEEDED)", err)
	}
	second.Close()
	if err := health(third, brokertest.WaitTimeout); err != nil {
		t.Fatalf("the third connection once the second closed: %v", err)
	}
}

// A worker stream sending more than its message rate is closed with RESOURCE_EXHAUSTED.
func TestStreamMessageRate(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{Limits: withStreamLimits(10, 0)})
	w := b.Connect(brokertest.Hello("chatty", 1, "t"))
	hb := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{}}}
	for range 11 { // the fake clock stands still: no budget comes back
		w.Send(hb)
	}
	if err := w.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("11 messages at 10 a second: %v, want RESOURCE_EXHAUSTED", err)
	}
	// A second later the budget is back.
	w2 := b.Connect(brokertest.Hello("calm", 1, "t"))
	bogus := &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{
		Leases: []*jobwirev1.LeaseRef{{JobId: 1, LeaseToken: "1.00000000000000000000000000000000"}}}}}
	// Each counts twice (the message and the lease it names) and is answered, so each is known
	// to be counted before the clock moves.
	for range 5 {
		w2.Send(bogus)
		if w2.Next().GetRefused() == nil {
			t.Fatal("a heartbeat for a bogus lease was not refused")
		}
	}
	b.Clock.Advance(time.Second)
	w2.Send(bogus)
	if w2.Next().GetRefused() == nil {
		t.Fatal("a second later the stream did not take another message")
	}
	// A heartbeat naming more leases than the budget holds is too much at once.
	w3 := b.Connect(brokertest.Hello("wide", 20, "t"))
	wide := &jobwirev1.Heartbeat{}
	for i := range 11 {
		wide.Leases = append(wide.Leases, &jobwirev1.LeaseRef{JobId: int64(i + 1), LeaseToken: "x"})
	}
	w3.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: wide}})
	if err := w3.Err(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a heartbeat naming 11 leases at 10 a second: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func withStreamLimits(rate, streams int) server.Limits {
	l := server.DefaultLimits()
	if rate > 0 {
		l.MaxStreamMessageRate = rate
	}
	if streams > 0 {
		l.MaxWorkerStreams = streams
	}
	return l
}

// The broker serves a bounded number of worker streams; past it, RESOURCE_EXHAUSTED.
func TestWorkerStreamCount(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{Limits: withStreamLimits(0, 2)})
	first := b.Connect(brokertest.Hello("a", 1, "t"))
	b.Connect(brokertest.Hello("b", 1, "t"))
	if _, err := b.ConnectOn(b.Workers, brokertest.Hello("c", 1, "t")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	first.Kill()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		_, err := b.ConnectOn(b.Workers, brokertest.Hello("c", 1, "t"))
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("a stream after one closed: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// rawCodec sends bytes as they are, to put what a proto library would refuse on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// protoString encodes field num as a string holding s, valid UTF-8 or not.
func protoString(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

// protoMessage encodes field num as a message holding body.
func protoMessage(num protowire.Number, body []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
}

// Invalid UTF-8 in a string field is INVALID_ARGUMENT, on unary calls and on the worker stream,
// not INTERNAL.
func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	bad := "t\xff\xfe"
	enqueue := protoMessage(1, protoString(1, bad)) // EnqueueRequest{job: {type: bad}}
	var out []byte
	err := b.Conn.Invoke(ctx, jobwirev1.ProducerService_Enqueue_FullMethodName, enqueue, &out, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("Enqueue with invalid UTF-8: %v, want INVALID_ARGUMENT", err)
	}
	stream, err := b.Conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
		jobwirev1.WorkerService_Connect_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	hello := protoMessage(1, protoString(1, bad)) // ConnectRequest{hello: {worker_id: bad}}
	if err := stream.SendMsg(hello); err != nil {
		t.Fatal(err)
	}
	if err := stream.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Hello with invalid UTF-8: %v, want INVALID_ARGUMENT", err)
	}
}

// Worker streams hold a call for as long as they are open: with fewer stream workers
// (Transport.StreamWorkers) than open streams, other calls still run, each on a goroutine of
// its own, rather than wait for a stream to end.
func TestStreamWorkersHeldByWorkerStreams(t *testing.T) {
	t.Parallel()
	tr := server.DefaultTransport()
	tr.StreamWorkers = 1
	b := brokertest.New(t, brokertest.Options{Transport: tr})
	for i := range 3 {
		b.Connect(brokertest.Hello(fmt.Sprintf("w%d", i), 1, "t"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}}); err != nil {
		t.Fatalf("an enqueue while 3 worker streams hold the one stream worker: %v", err)
	}
}
