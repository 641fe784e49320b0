package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/job"
)

type workers struct {
	*Server
	jobwirev1.UnimplementedWorkerServiceServer
}

// Connect runs one worker session: this goroutine receives, a second one sends (a stream has
// exactly one of each).
func (w *workers) Connect(stream jobwirev1.WorkerService_ConnectServer) error {
	ctx := stream.Context()
	if n := w.streams.Add(1); n > int64(w.limits.MaxWorkerStreams) {
		w.streams.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "the broker serves at most %d worker streams at once; retry later", w.limits.MaxWorkerStreams)
	}
	defer w.streams.Add(-1)
	if p, ok := auth.PrincipalFrom(ctx); ok {
		if !w.tokenStreams.acquire(p.TokenID, w.limits.MaxWorkerStreamsPerToken) {
			return status.Errorf(codes.ResourceExhausted, "token %s already has %d worker streams open on this broker, the most one token may (max_worker_streams_per_token); close one, or give the workers tokens of their own",
				p.TokenID, w.limits.MaxWorkerStreamsPerToken)
		}
		defer w.tokenStreams.release(p.TokenID)
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if err := validateHello(hello); err != nil {
		return err
	}
	if err := authorizeHello(ctx, hello); err != nil {
		return err
	}
	sess, welcome, err := w.b.Open(ctx, broker.Hello{
		WorkerID: hello.GetWorkerId(),
		Types:    hello.GetJobTypes(),
		Queues:   hello.GetQueues(),
		Capacity: int(hello.GetCapacity()),
		Held:     refsFromProto(hello.GetHeld()),
		Movable:  hello.GetMovable(),
		Owner:    streamOwner(ctx),
	})
	if err != nil {
		return toStatus(err)
	}
	defer sess.Close()
	if err := stream.Send(messageToProto(welcome)); err != nil {
		return err
	}
	w.log.Debug("worker connected", "worker", hello.GetWorkerId(), "session", sess.ID(),
		"types", hello.GetJobTypes(), "capacity", hello.GetCapacity())

	sendErr := make(chan error, 1)
	sendCtx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	go func() { sendErr <- sendLoop(sendCtx, stream, sess, hello.GetAcceptsBatches(), w.maxToWorker) }()

	recvErr := make(chan error, 1)
	go func() { recvErr <- w.recvLoop(stream, sess) }()
	select {
	case err := <-recvErr:
		if errors.Is(err, io.EOF) {
			// Every message the worker sent was read: what it did not start, it never will.
			sess.HalfClosed()
			return nil
		}
		return err
	case err := <-sendErr:
		return err
	case <-sess.Overflowed():
		// The send loop may be stuck in a send the worker never reads: ending the call
		// resets the stream, which frees it.
		w.log.Warn("closed the stream of a worker that does not read it", "worker", hello.GetWorkerId(), "session", sess.ID())
		return status.Errorf(codes.ResourceExhausted, "%v: more than %d bytes were waiting to be sent; the stream is closed",
			broker.ErrOutboxFull, broker.MaxOutboxBytes)
	}
}

func sendLoop(ctx context.Context, stream jobwirev1.WorkerService_ConnectServer, sess *broker.Session, batches bool, limit int) error {
	for {
		msgs, err := sess.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, broker.ErrOutboxFull) {
				return status.Errorf(codes.ResourceExhausted, "%v; the stream is closed, reconnect and read it", err)
			}
			if errors.Is(err, broker.ErrMoved) || errors.Is(err, broker.ErrUnreachable) {
				return status.Error(codes.Unavailable, err.Error())
			}
			// The broker closed the session (shutdown): end the stream cleanly.
			return status.Error(codes.Unavailable, "the broker is shutting down; reconnect shortly")
		}
		for _, frame := range frames(msgs, batches, limit, sess.Undeliverable) {
			if stages.Active() && assigns(frame) {
				stages.Mark(stages.StreamSend)
			}
			if err := stream.Send(frame); err != nil {
				return err
			}
		}
	}
}

// assigns reports whether frame carries an assignment: the traced job's (package stages) is
// the first sent after its lease was handed out; acknowledgements of other jobs' results
// pass between.
func assigns(frame *jobwirev1.ConnectResponse) bool {
	if frame.GetAssignment() != nil {
		return true
	}
	return slices.ContainsFunc(frame.GetBatch().GetMessages(), func(m *jobwirev1.ConnectResponse) bool {
		return m.GetAssignment() != nil
	})
}

// frames turns the messages ready at once into what goes on the wire: one frame each, or, for
// a worker that accepts batches, batches of up to MaxBatchMessages and MaxBatchBytes. Every
// gRPC message costs the worker a stream read, which is most of what a small job costs a
// worker library, so a batch of n saves it n-1 of them. A lone message is never wrapped. An
// assignment larger than limit bytes is left out and handed to tooLarge.
func frames(msgs []broker.Message, batches bool, limit int, tooLarge func(ref job.LeaseRef, size, limit int)) []*jobwirev1.ConnectResponse {
	out := make([]*jobwirev1.ConnectResponse, 0, len(msgs))
	if !batches {
		for _, m := range msgs {
			if p, _ := sendable(m, limit, tooLarge); p != nil {
				out = append(out, p)
			}
		}
		return out
	}
	type wire struct {
		p *jobwirev1.ConnectResponse
		n int // encoded size
	}
	ready := make([]wire, 0, len(msgs))
	for _, m := range msgs {
		if p, n := sendable(m, limit, tooLarge); p != nil {
			ready = append(ready, wire{p, n})
		}
	}
	for run := range packs(ready, MaxBatchMessages, MaxBatchBytes, func(w wire) int { return w.n }) {
		if len(run) == 1 {
			out = append(out, run[0].p)
			continue
		}
		inner := make([]*jobwirev1.ConnectResponse, len(run))
		for i, w := range run {
			inner[i] = w.p
		}
		out = append(out, &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Batch{
			Batch: &jobwirev1.ConnectResponseBatch{Messages: inner}}})
	}
	return out
}

// sendable is m's wire form and its encoded size, or nil for an assignment too large to send,
// which it hands to tooLarge. Only an assignment carries what a producer or a parent's
// handler chose the size of.
func sendable(m broker.Message, limit int, tooLarge func(ref job.LeaseRef, size, limit int)) (*jobwirev1.ConnectResponse, int) {
	p := messageToProto(m)
	n := p.SizeVT()
	if a, ok := m.(broker.Assignment); ok && n > limit {
		tooLarge(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, n, limit)
		return nil, 0
	}
	return p, n
}

func (w *workers) recvLoop(stream jobwirev1.WorkerService_ConnectServer, sess *broker.Session) error {
	rate := w.limits.MaxStreamMessageRate
	budget := newMessageBudget(rate, w.clk.Now())
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		inner := []*jobwirev1.ConnectRequest{msg}
		if b, ok := msg.GetMessage().(*jobwirev1.ConnectRequest_Batch); ok {
			if err := validateRequestBatch(b.Batch); err != nil {
				return err
			}
			inner = b.Batch.GetMessages()
		}
		// Each message of a batch counts as if sent alone, and a message naming many leases
		// costs the broker as much as that many messages.
		cost := 0
		for _, m := range inner {
			cost += 1 + len(m.GetHeartbeat().GetLeases())
		}
		if !budget.take(w.clk.Now(), cost) {
			return status.Errorf(codes.ResourceExhausted, "the worker sent more than %d messages (counting each message of a batch and each lease a heartbeat names) a second; the stream is closed", rate)
		}
		for _, m := range inner {
			if err := validateRequest(m, sess.Capacity()); err != nil {
				return err
			}
		}
		for _, m := range inner {
			if err := applyRequest(sess, m); err != nil {
				return err
			}
		}
	}
}

// applyRequest hands one worker message (never a batch: recvLoop unpacks those), which
// validateRequest has passed, to the session.
func applyRequest(sess *broker.Session, msg *jobwirev1.ConnectRequest) error {
	switch m := msg.GetMessage().(type) {
	case *jobwirev1.ConnectRequest_Started:
		sess.Started(refFromProto(m.Started.GetJobId(), m.Started.GetLeaseToken()))
	case *jobwirev1.ConnectRequest_Heartbeat:
		sess.Heartbeat(refsFromProto(m.Heartbeat.GetLeases()))
	case *jobwirev1.ConnectRequest_Result:
		r := m.Result
		var f *job.Failure // nil: success
		if o, ok := r.GetOutcome().(*jobwirev1.Result_Failure); ok {
			f = failureFromProto(o.Failure)
		}
		sess.Finish(refFromProto(r.GetJobId(), r.GetLeaseToken()), f, r.GetSuccess().GetResult())
	case *jobwirev1.ConnectRequest_Release:
		sess.Release(refFromProto(m.Release.GetJobId(), m.Release.GetLeaseToken()))
	case *jobwirev1.ConnectRequest_Progress:
		sess.Progress(refFromProto(m.Progress.GetJobId(), m.Progress.GetLeaseToken()), progressFromProto(m.Progress))
	case *jobwirev1.ConnectRequest_Drain:
		sess.Drain()
	case *jobwirev1.ConnectRequest_Hello:
		return status.Error(codes.InvalidArgument, "hello: only the first message on a stream may be hello")
	default:
		return status.Error(codes.InvalidArgument, "message: empty or unknown message type")
	}
	return nil
}

// streamOwner is who a worker stream authenticated as: its token's accessor id, or "" when auth
// is off. Leases are granted to it with the worker id, and only a stream of the same owner and
// worker id adopts them after a reconnect.
func streamOwner(ctx context.Context) string {
	if p, ok := auth.PrincipalFrom(ctx); ok {
		return p.TokenID
	}
	return ""
}

// messageBudget is a token bucket: rate messages a second, and a burst of one second's worth.
type messageBudget struct {
	rate   float64
	tokens float64
	last   time.Time
}

func newMessageBudget(rate int, now time.Time) *messageBudget {
	return &messageBudget{rate: float64(rate), tokens: float64(rate), last: now}
}

// take spends n messages' worth and reports whether the budget allowed it.
func (m *messageBudget) take(now time.Time, n int) bool {
	if d := now.Sub(m.last); d > 0 {
		m.tokens = min(m.rate, m.tokens+d.Seconds()*m.rate)
		m.last = now
	}
	if m.tokens < float64(n) {
		return false
	}
	m.tokens -= float64(n)
	return true
}
