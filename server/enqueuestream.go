package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
	"github.com/jobwire/jobwire/internal/clock"
)

// UnreadTrailer is the trailer with which a broker ends an EnqueueStream between requests
// (status UNAVAILABLE) as it shuts down or stops serving, or once the stream has been idle for
// Limits.EnqueueStreamIdle: a request sent on the stream and not answered was not read, so
// sending it again cannot store its job twice.
const UnreadTrailer = "jobwire-unread"

// EnqueueStream answers each request of the stream as a unary Enqueue would, in order, one at
// a time: the request goes through the same interceptors (the call log, panic recovery, UTF-8,
// authentication and the access rule of Enqueue, validation, the audit's actor, the token's
// scope, the database's reach) and Enqueue itself, under Enqueue's method name. A request's
// error is its answer; the stream goes on. What the stream as a whole fails with (its token
// revoked, a message that cannot be decoded) ends it, and so does a request refused because the
// database is silent, with nothing of it applied (brokerset.NotApplied): with that status, whose
// details an answer cannot carry.
//
// A producer keeps its streams open while idle, and the gRPC server's graceful stop waits for
// every stream to end, and a balancer that finds a broker NOT_SERVING sends new calls
// elsewhere but leaves open streams where they are: so when the broker shuts down
// (SetNotServing) or stops serving (it cannot reach its database), each stream open then ends
// between requests, with UnreadTrailer, and its producer makes its next enqueue elsewhere. So
// does a stream that carried no request for Limits.EnqueueStreamIdle.
func (p *producer) EnqueueStream(st jobwirev1.ProducerService_EnqueueStreamServer) error {
	end := p.enqueueStreamsEnd()
	info := &grpc.UnaryServerInfo{Server: p, FullMethod: jobwirev1.ProducerService_Enqueue_FullMethodName}
	ctx := grpc.NewContextWithServerTransportStream(st.Context(), localStream(info.FullMethod))
	enqueue := bindUnary(p.requests, info, func(ctx context.Context, req any) (any, error) {
		return p.Enqueue(ctx, req.(*jobwirev1.EnqueueRequest))
	})
	e := enqueueStream{now: p.clk.Now, last: p.clk.Now()}
	done := make(chan error, 1)
	go func() { done <- e.serve(ctx, st, enqueue) }()
	// The idle timer wakes the handler now and then; the stream ends once it has carried no
	// request for EnqueueStreamIdle.
	idle := p.limits.EnqueueStreamIdle
	wake := make(chan struct{}, 1)
	arm := func(d time.Duration) clock.Timer {
		return p.clk.AfterFunc(d, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}
	timer := arm(idle)
	defer func() { timer.Stop() }()
	var why string
wait:
	for {
		select {
		case err := <-done:
			return err
		case <-end:
			why = "the broker is shutting down or cannot reach its database"
			break wait
		case <-wake:
			if left := e.idleLeft(idle); left > 0 {
				timer = arm(left)
				continue
			}
			why = "the stream carried no request for " + idle.String()
			break wait
		}
	}
	if e.end() {
		if err := <-done; err != nil {
			return err
		}
	}
	st.SetTrailer(metadata.Pairs(UnreadTrailer, "true"))
	return status.Error(codes.Unavailable, why+"; a request unanswered on this stream was not read: send it again")
}

// enqueueStream is what an EnqueueStream's reading goroutine and its handler share: whether
// a request is being answered, and whether the stream is ending (the broker shutting down).
// The handler's goroutine cannot end the stream while a request is being answered, nor the
// reading goroutine start answering one once the stream is ending, so that a request is
// either answered or unread.
type enqueueStream struct {
	now    func() time.Time
	mu     sync.Mutex
	busy   bool
	ending bool
	last   time.Time // when the last request was answered, or the stream opened
}

// errUnread ends the reading goroutine with a request it read after the stream began to end.
var errUnread = errors.New("request read while the stream ends")

// serve reads and answers the stream's requests until it ends or ending is set.
func (e *enqueueStream) serve(ctx context.Context, st jobwirev1.ProducerService_EnqueueStreamServer, enqueue grpc.UnaryHandler) error {
	for {
		in, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !e.begin() {
			return errUnread
		}
		req := in.GetRequest()
		if req == nil {
			req = &jobwirev1.EnqueueRequest{} // answered as an Enqueue without a job is
		}
		out := &jobwirev1.EnqueueStreamResponse{}
		if resp, err := enqueue(ctx, req); err != nil {
			if brokerset.NotApplied(err) {
				// Refused, or withdrawn from the writer, because the database is silent:
				// nothing of it was applied. An answer would carry only a code and a message;
				// ending the stream with the status itself tells the producer so, and it sends
				// the request again elsewhere, as after a stream that ended unread.
				return err
			}
			s := status.Convert(err)
			out.Result = &jobwirev1.EnqueueStreamResponse_Error{Error: &jobwirev1.EnqueueStreamError{
				Code: int32(s.Code()), Message: s.Message()}}
		} else {
			out.Result = &jobwirev1.EnqueueStreamResponse_Response{Response: resp.(*jobwirev1.EnqueueResponse)}
		}
		err = st.Send(out)
		if ending := e.finish(); err != nil || ending {
			return err
		}
	}
}

// begin marks a request being answered, unless the stream is ending.
func (e *enqueueStream) begin() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.busy = !e.ending
	return e.busy
}

// finish marks the request answered and reports whether the stream is ending.
func (e *enqueueStream) finish() bool {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.busy, e.last = false, now
	return e.ending
}

// idleLeft is how much longer the stream may stay idle before it has been idle for idle: all
// of it while a request is being answered.
func (e *enqueueStream) idleLeft(idle time.Duration) time.Duration {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy {
		return idle
	}
	return idle - now.Sub(e.last)
}

// end makes the stream end and reports whether a request is being answered, which ends it
// once answered.
func (e *enqueueStream) end() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ending = true
	return e.busy
}
