package worker

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// testLeaseAllowance is how long a lease lasts on the worker's clock with the scripted broker's
// Welcome (a lease of 3*testHeartbeat): the lease less its margin of a tenth.
const testLeaseAllowance = 3*testHeartbeat - 3*testHeartbeat/10

func TestLeaseMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lease, heartbeat, want time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 3 * time.Second}, // the broker's defaults: a tenth
		{3 * time.Second, time.Second, 300 * time.Millisecond},
		{time.Second, 333 * time.Millisecond, minLeaseMargin},             // a tenth would be too small
		{10 * time.Minute, 200 * time.Second, maxLeaseMargin},             // a tenth would waste the lease
		{3 * time.Second, 2900 * time.Millisecond, 50 * time.Millisecond}, // half of what a heartbeat has left
		{time.Second, 2 * time.Second, 0},                                 // a heartbeat slower than the lease
	}
	for _, tt := range tests {
		if got := leaseMargin(tt.lease, tt.heartbeat); got != tt.want {
			t.Errorf("leaseMargin(%s, %s) = %s, want %s", tt.lease, tt.heartbeat, got, tt.want)
		}
	}
}

// leaseEnd reads the worker's deadline for a lease it holds.
func (tb *testBundle) leaseEnd(t *testing.T, ref *jobwirev1.LeaseRef) time.Time {
	t.Helper()
	tb.worker.mu.Lock()
	defer tb.worker.mu.Unlock()
	tk := tb.worker.tasks[refOf(ref.GetJobId(), ref.GetLeaseToken())]
	if tk == nil {
		t.Fatalf("the worker does not hold %v", ref)
	}
	return tk.leaseEnd
}

// barrier returns once the worker has handled every broker message sent before it: an
// assignment of a type it has no handler for is released, in order.
func (bs *brokerStream) barrier(id int64) {
	bs.t.Helper()
	bs.release(bs.assign(id, "no-such-type", ""))
}

func TestLeaseRunsOutWithoutAnExtension(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	// The broker answers nothing: it is frozen. The handler's context ends once the lease has
	// passed on the worker's clock, less the margin, and no result follows.
	bs.running(g)
	tb.clock.Advance(testHeartbeat)
	bs.heartbeat()
	tb.clock.Advance(testHeartbeat)
	bs.heartbeat()
	tb.clock.Advance(testLeaseAllowance - 2*testHeartbeat)
	if cause := g.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	// The job is forgotten: the next message is the Drain, neither a Result nor a heartbeat.
	tb.shutdown(t, bs)
}

func TestLeaseRunsOutWhileDisconnected(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	bs.kill(codes.Unavailable)
	// The worker reconnects, but the broker never answers its Hello.
	tb.reconnectHolding(t, ref)
	tb.clock.Advance(testLeaseAllowance)
	if cause := g.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
}

func TestHeartbeatAckExtendsTheLeaseFromTheHeartbeat(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)
	start := tb.clock.Now()

	ref := bs.running(g)
	if got, want := tb.leaseEnd(t, ref), start.Add(testLeaseAllowance); !got.Equal(want) {
		t.Fatalf("lease ends at %s, want the assignment's arrival plus the allowance, %s", got, want)
	}

	// The broker extends the lease from when it reads the heartbeat, which is no later than
	// the worker sent it: the deadline counts from the heartbeat, not from the answer.
	tb.clock.Advance(testHeartbeat)
	sent := tb.clock.Now()
	bs.heartbeat()
	tb.clock.Advance(testHeartbeat / 2)
	bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_HeartbeatAck{HeartbeatAck: &jobwirev1.HeartbeatAck{
		Extended: []*jobwirev1.LeaseRef{ref},
	}}})
	bs.barrier(2)
	end := sent.Add(testLeaseAllowance)
	if got := tb.leaseEnd(t, ref); !got.Equal(end) {
		t.Fatalf("lease ends at %s, want the heartbeat's send time plus the allowance, %s", got, end)
	}

	// Past the first deadline the handler still runs; unanswered heartbeats move nothing.
	for tb.clock.Now().Add(testHeartbeat).Before(end) {
		tb.clock.Advance(testHeartbeat)
		bs.heartbeat()
	}
	bs.barrier(3)
	select {
	case cause := <-g.causes:
		t.Fatalf("handler cancelled (%v) before the extended deadline", cause)
	default:
	}
	tb.clock.Advance(end.Sub(tb.clock.Now()))
	if cause := g.waitCause(t); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	tb.shutdown(t, bs)
}

func TestAnsweredHeartbeatsKeepTheLease(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)

	ref := bs.running(g)
	// Five heartbeats, each answered, carry the job well past its first lease.
	for i := range 5 {
		tb.clock.Advance(testHeartbeat)
		bs.heartbeat()
		bs.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_HeartbeatAck{HeartbeatAck: &jobwirev1.HeartbeatAck{
			Extended: []*jobwirev1.LeaseRef{ref},
		}}})
		bs.barrier(int64(10 + i))
	}
	g.proceed <- nil
	if r := bs.result(ref); r.GetSuccess() == nil {
		t.Errorf("result = %v, want success", r)
	}
	bs.ack(ref)
	tb.shutdown(t, bs)
}

func TestHeartbeatsOfAnEarlierStreamAreForgotten(t *testing.T) {
	t.Parallel()
	tb, bs, g := setupGated(t)
	start := tb.clock.Now()

	ref := bs.running(g)
	// A heartbeat the broker never answers: the stream breaks.
	tb.clock.Advance(testHeartbeat)
	bs.heartbeat()
	bs.kill(codes.Unavailable)

	bs2 := tb.connect(t)
	bs2.started(ref) // sent again: the broker may not have read the first
	bs2.barrier(2)
	if got, want := tb.leaseEnd(t, ref), start.Add(testLeaseAllowance); !got.Equal(want) {
		t.Fatalf("after the reconnect the lease ends at %s, want it unchanged, %s", got, want)
	}
	tb.clock.Advance(testHeartbeat)
	sent := tb.clock.Now()
	bs2.heartbeat()
	bs2.send(&jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_HeartbeatAck{HeartbeatAck: &jobwirev1.HeartbeatAck{
		Extended: []*jobwirev1.LeaseRef{ref},
	}}})
	bs2.barrier(3)
	if got, want := tb.leaseEnd(t, ref), sent.Add(testLeaseAllowance); !got.Equal(want) {
		t.Fatalf("lease ends at %s, want it counted from the new stream's heartbeat, %s", got, want)
	}
	g.proceed <- nil
	bs2.result(ref)
	bs2.ack(ref)
	tb.shutdown(t, bs2)
}
