package client

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

// DefaultEnqueueStreams is how many enqueue streams a Client made by Dial opens at most
// (WithEnqueueStreams): one per concurrent Enqueue, opened as needed, up to half the calls the
// broker allows on one connection by default.
const DefaultEnqueueStreams = 64

// WithEnqueueStreams makes Enqueue send each job on one of up to n long-lived EnqueueStream
// streams, instead of a call of its own: the broker answers it as it answers Enqueue (the same
// checks, errors, commit and metrics), and the call's own cost (its headers, a stream opened
// and ended on both sides) is paid once per stream instead of once per job. A producer
// enqueueing one job per call from 64 goroutines enqueued 1.6-1.7 times as many jobs a second
// with it (docs/performance.md). A Client made by Dial does this with DefaultEnqueueStreams
// unless told otherwise; one made by New, whose connection may be shared or in process, or by
// DialBrokers, whose calls are spread and resent one by one, only when given this option. n of
// zero or less makes a call per job, which client-side unary interceptors then see.
//
// A stream carries one Enqueue at a time, so n is how many may be in flight at once; an
// Enqueue that finds all n busy is made as a call of its own. Keep n below the broker's calls
// per connection (128 by default) less what else the connection carries. A stream that fails
// is dropped, its Enqueue failing as a call would (a job may have been stored when a stream
// breaks, as when a call does: use an idempotency key to retry safely), and the next Enqueue
// opens another. A stream that ended while idle (its connection closed: the broker restarted,
// say) sends nothing, and a broker shutting down ends its streams between requests, saying the
// request it was sent was not read, and one that cannot reach its database refuses a new stream
// or ends one on the request it refused, saying nothing of it was applied: such an Enqueue is
// made as a call instead. Against a broker without EnqueueStream, Enqueue goes back to calls.
//
// The caller's deadline or cancellation ends the stream it was sent on, as it ends a call;
// as with a call, the job may be stored all the same. A caller
// whose context carries gRPC metadata (metadata.AppendToOutgoingContext) gets a call: a
// stream's requests cannot carry their own.
func WithEnqueueStreams(n int) Option { return enqueueStreamsOption{n} }

type enqueueStreamsOption struct{ n int }

func (o enqueueStreamsOption) applyClient(c *Client) {
	c.streams = nil
	if o.n > 0 {
		c.streams = newStreamPool(c.producer, o.n)
	}
}

func (o enqueueStreamsOption) applyDial(c *dialConfig) { c.clientOpts = append(c.clientOpts, o) }

// unreadTrailer marks a stream the broker ended between requests as it shut down
// (server.UnreadTrailer): a request not answered on it was not read.
const unreadTrailer = "jobwire-unread"

// streamPool keeps the EnqueueStream streams that are not carrying an Enqueue.
type streamPool struct {
	producer jobwirev1.ProducerServiceClient
	idle     chan *enqueueStream
	slots    chan struct{} // one token per open stream, at most n
	// off: the broker does not serve EnqueueStream; Enqueue makes calls.
	off atomic.Bool

	mu     sync.Mutex
	closed bool
}

// enqueueStream is one open stream and what ends it.
type enqueueStream struct {
	st     jobwirev1.ProducerService_EnqueueStreamClient
	cancel context.CancelFunc
}

func newStreamPool(producer jobwirev1.ProducerServiceClient, n int) *streamPool {
	return &streamPool{producer: producer, idle: make(chan *enqueueStream, n), slots: make(chan struct{}, n)}
}

// enqueue sends req on a stream and returns its answer. ok is false when no stream took it
// (every stream busy, the pool closed, or the broker without EnqueueStream) or none could
// have read it: the caller then makes the call itself.
func (p *streamPool) enqueue(ctx context.Context, req *jobwirev1.EnqueueRequest) (resp *jobwirev1.EnqueueResponse, ok bool, err error) {
	if p.off.Load() {
		return nil, false, nil
	}
	s, err := p.take()
	if s == nil && err == nil {
		return nil, false, nil
	}
	var out *jobwirev1.EnqueueStreamResponse
	sent := false
	if err == nil {
		out, sent, err = p.roundTrip(ctx, s, req)
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		// The stream was refused before the request was read (an older broker), or could not
		// be opened (a connection that serves no streams).
		p.off.Store(true)
		return nil, false, nil
	case err != nil && !sent && ctx.Err() == nil:
		// Nothing was read: the stream could not be opened, had ended before the request
		// could go out (its connection closed while it was idle, when the broker restarted,
		// say), or the broker ended it without reading the request. A call is safe.
		return nil, false, nil
	case err != nil:
		return nil, true, err
	case out.GetError() != nil:
		return nil, true, status.Error(codes.Code(out.GetError().GetCode()), out.GetError().GetMessage())
	case out.GetResponse() == nil:
		return nil, true, status.Error(codes.Internal, "the broker answered an EnqueueStream request with neither a job nor an error")
	}
	return out.GetResponse(), true, nil
}

// roundTrip sends req on s and waits for its answer, or for ctx to end (which ends s); err is
// the stream's (or ctx's), never the request's, which is in the answer. sent is false when
// the broker cannot have read req: the stream had ended before req could be sent (gRPC sends
// nothing on a stream that ended), or the broker ended it unread (unreadTrailer).
// The stream goes back to the pool after an answer unless ctx ended it; a broken one is
// dropped. An answer that arrived is returned even when ctx ended just after.
func (p *streamPool) roundTrip(ctx context.Context, s *enqueueStream, req *jobwirev1.EnqueueRequest) (out *jobwirev1.EnqueueStreamResponse, sent bool, err error) {
	stop := context.AfterFunc(ctx, s.cancel)
	err = s.st.Send(&jobwirev1.EnqueueStreamRequest{Request: req})
	sent = err == nil
	if sent {
		out, err = s.st.Recv()
		if err != nil && (len(s.st.Trailer().Get(unreadTrailer)) > 0 || brokerset.NotApplied(err)) {
			// The broker ended the stream as it shut down, without reading req, or because it
			// cannot reach its database refused the stream (a balancer that had not yet seen
			// it say NOT_SERVING opened it there) or req: nothing of req was applied.
			sent = false
		}
	} else {
		_, err = s.st.Recv() // Send reports only that the stream ended; Recv has its status
	}
	ended := !stop() // ctx ended, and with it the stream
	switch {
	case err != nil && ended:
		p.drop(s)
		return nil, sent, status.FromContextError(ctx.Err()).Err() // as a call's status says
	case err != nil:
		p.drop(s)
		return nil, sent, err
	case ended:
		p.drop(s)
	default:
		p.put(s)
	}
	return out, sent, nil
}

// take returns an idle stream, or a new one while fewer than n are open, or nil when all n
// are busy or the pool is closed.
func (p *streamPool) take() (*enqueueStream, error) {
	select {
	case s := <-p.idle:
		return s, nil
	default:
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, nil
	}
	select {
	case p.slots <- struct{}{}:
	default:
		return nil, nil
	}
	// Opened without the lock: opening may wait for the connection's room for calls. A stream
	// opened while the pool closes ends when it is put back.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := p.producer.EnqueueStream(ctx)
	if err != nil {
		cancel()
		<-p.slots
		return nil, err
	}
	return &enqueueStream{st: st, cancel: cancel}, nil
}

// put gives s back to the pool, or ends it once the pool is closed.
func (p *streamPool) put(s *enqueueStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		s.cancel()
		<-p.slots
		return
	}
	p.idle <- s // never blocks: the pool holds at most n streams, each in one place
}

// drop ends s and frees its slot.
func (p *streamPool) drop(s *enqueueStream) {
	s.cancel()
	<-p.slots
}

// close ends the idle streams; the busy ones end when they come back.
func (p *streamPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for {
		select {
		case s := <-p.idle:
			s.cancel()
			<-p.slots
		default:
			return
		}
	}
}
