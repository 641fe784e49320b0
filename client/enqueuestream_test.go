package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// countingStreams counts the EnqueueStream streams a connection opens and the Enqueue calls
// it makes, to tell which way a job went.
type countingStreams struct {
	mu             sync.Mutex
	streams, calls int
	bundle         *brokertest.Bundle // the broker dialed, for dialCountingStreams
}

func (c *countingStreams) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == jobwirev1.ProducerService_EnqueueStream_FullMethodName {
				c.mu.Lock()
				c.streams++
				c.mu.Unlock()
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == jobwirev1.ProducerService_Enqueue_FullMethodName {
				c.mu.Lock()
				c.calls++
				c.mu.Unlock()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
	}
}

func (c *countingStreams) counts() (streams, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams, c.calls
}

// dialCountingStreams starts a broker and dials it with up to n enqueue streams, counting
// the streams and calls the client makes.
func dialCountingStreams(t *testing.T, n int) (*client.Client, *countingStreams) {
	t.Helper()
	b := brokertest.New(t, brokertest.Options{})
	counts := countingStreams{bundle: b}
	c, err := client.Dial(t.Context(), b.Addr, client.WithEnqueueStreams(n), client.WithDialOptions(counts.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, &counts
}

// Enqueue over streams stores each job as a call would, answers a request's error as a call's
// (the stream goes on), and keeps to one stream for one caller at a time.
func TestEnqueueStreamsStoreAndAnswerAsCalls(t *testing.T) {
	t.Parallel()
	c, n := dialCountingStreams(t, 4)
	ctx := t.Context()

	first, err := c.Enqueue(ctx, "mail", []byte(`{"to":"a"}`), client.Queue("outbox"), client.IdempotencyKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, first.ID)
	if err != nil || got.Type != "mail" || got.Queue != "outbox" || string(got.Payload) != `{"to":"a"}` {
		t.Fatalf("Get(%d) = %+v, %v; want the job as enqueued", first.ID, got, err)
	}
	// A bad request is answered with the call's error, INVALID_ARGUMENT naming the field.
	_, err = c.Enqueue(ctx, "", nil)
	var cerr *client.Error
	if !errors.As(err, &cerr) || cerr.Code != codes.InvalidArgument || cerr.Op != "Enqueue" {
		t.Fatalf("Enqueue of a job without a type = %v; want the call's INVALID_ARGUMENT", err)
	}
	// The stream goes on: the same key answers the same job as a duplicate.
	again, err := c.Enqueue(ctx, "mail", []byte(`{"to":"a"}`), client.Queue("outbox"), client.IdempotencyKey("k1"))
	if err != nil || again.ID != first.ID || !again.Duplicate {
		t.Fatalf("Enqueue again with the key = %+v, %v; want job %d as a duplicate", again, err, first.ID)
	}
	if streams, calls := n.counts(); streams != 1 || calls != 0 {
		t.Fatalf("one caller at a time opened %d streams and made %d calls; want 1 and 0", streams, calls)
	}
}

// Many callers share at most n streams; those who find every stream busy make calls, and
// every job is stored once.
func TestEnqueueStreamsBoundedAndFallBackToCalls(t *testing.T) {
	t.Parallel()
	c, n := dialCountingStreams(t, 3)
	const callers, each = 16, 25
	ids := make(chan int64, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				r, err := c.Enqueue(t.Context(), "bulk", nil)
				if err != nil {
					t.Error(err)
					return
				}
				ids <- r.ID
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("job %d answered twice", id)
		}
		seen[id] = true
	}
	if len(seen) != callers*each {
		t.Fatalf("%d jobs answered, want %d", len(seen), callers*each)
	}
	streams, calls := n.counts()
	// 16 callers at once over 3 streams: some found every stream busy.
	if streams == 0 || streams > 3 || calls == 0 {
		t.Fatalf("%d streams opened and %d calls made; want 1 to 3 streams and some calls", streams, calls)
	}
}

// A caller that stops waiting gets the call's status for it, and the next Enqueue works on a
// new stream.
func TestEnqueueStreamCancelledCaller(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c, err := client.Dial(t.Context(), b.Addr, client.WithEnqueueStreams(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Enqueue(ctx, "mail", nil)
	var cerr *client.Error
	if !errors.As(err, &cerr) || cerr.Code != codes.Canceled {
		t.Fatalf("Enqueue with a cancelled context = %v; want CANCELED", err)
	}
	if _, err := c.Enqueue(t.Context(), "mail", nil); err != nil {
		t.Fatalf("Enqueue after a cancelled one: %v", err)
	}
}

// With auth on, every request of a stream is checked as an Enqueue: a producer token's scope
// refuses a job outside it (and the stream goes on), and a token of another role cannot open
// the stream at all.
func TestEnqueueStreamChecksEachRequestAsACall(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	scoped := b.Token(auth.RoleProducer, auth.Scope{Queues: []string{"mail"}})
	c := client.New(b.DialToken(scoped), client.WithEnqueueStreams(2))
	defer c.Close()
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, "send", nil, client.Queue("mail")); err != nil {
		t.Fatalf("Enqueue within the scope: %v", err)
	}
	_, err := c.Enqueue(ctx, "send", nil, client.Queue("billing"))
	var cerr *client.Error
	if !errors.As(err, &cerr) || cerr.Code != codes.PermissionDenied {
		t.Fatalf("Enqueue outside the scope = %v; want PERMISSION_DENIED", err)
	}
	if _, err := c.Enqueue(ctx, "send", nil, client.Queue("mail")); err != nil {
		t.Fatalf("Enqueue within the scope after a refusal: %v", err)
	}

	worker := b.Token(auth.RoleWorker, auth.Scope{})
	st, err := jobwirev1.NewProducerServiceClient(b.DialToken(worker)).EnqueueStream(ctx)
	if err == nil {
		_ = st.Send(&jobwirev1.EnqueueStreamRequest{Request: &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "send"}}})
		_, err = st.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a worker token's EnqueueStream = %v; want PERMISSION_DENIED", err)
	}
	if _, err := client.New(b.DialToken("")).Enqueue(ctx, "send", nil); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Enqueue without a token = %v; want UNAUTHENTICATED", err)
	}
}

// Streams left idle when their broker restarted are not handed to callers: the next Enqueues
// go through as calls would, on new streams, not fail on the old ones.
func TestEnqueueStreamsAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	var counts countingStreams
	c, err := client.Dial(t.Context(), b.Addr, client.WithEnqueueStreams(3), client.WithDialOptions(counts.dialOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	enqueueConcurrently := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				if _, err := c.Enqueue(ctx, "mail", []byte(`{}`)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Enqueue: %v", err)
		}
	}
	enqueueConcurrently(12)
	if s, _ := counts.counts(); s == 0 {
		t.Fatal("no stream was opened before the restart")
	}
	b.Restart()
	for i := range 6 {
		if _, err := c.Enqueue(ctx, "mail", []byte(`{}`)); err != nil {
			t.Fatalf("Enqueue %d after the restart: %v", i, err)
		}
	}
	enqueueConcurrently(12)
}

// A broker shutting down ends its idle enqueue streams, which its graceful stop would
// otherwise wait for until the producer closed them; a producer's next Enqueue then goes
// elsewhere, as a call (here: refused, nobody listens).
func TestEnqueueStreamsLetTheBrokerStopGracefully(t *testing.T) {
	t.Parallel()
	c, n := dialCountingStreams(t, 3)
	b := n.bundle
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if _, err := c.Enqueue(t.Context(), "mail", []byte(`{}`)); err != nil {
				t.Errorf("Enqueue: %v", err)
			}
		})
	}
	wg.Wait()
	if s, _ := n.counts(); s == 0 {
		t.Fatal("no stream was opened")
	}
	stopped := make(chan struct{})
	go func() { b.StopGracefully(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the broker's graceful stop still waits for the producer's idle enqueue streams after 30s")
	}
	_, calls := n.counts()
	if _, err := c.Enqueue(t.Context(), "mail", []byte(`{}`)); status.Code(err) != codes.Unavailable {
		t.Fatalf("Enqueue after the broker stopped: %v, want UNAVAILABLE", err)
	}
	if _, after := n.counts(); after != calls+1 {
		t.Fatalf("Enqueue after the broker stopped made %d calls, want 1 (its stream had ended)", after-calls)
	}
}

// A Client made by Dial enqueues on streams unless told not to; a caller whose context carries
// gRPC metadata gets a call, which carries it.
func TestDialEnqueuesOnStreamsByDefault(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	tests := []struct {
		name                   string
		opts                   []client.DialOption
		ctx                    func(context.Context) context.Context
		wantStreams, wantCalls int
	}{
		{"default", nil, nil, 1, 0},
		{"streams off", []client.DialOption{client.WithEnqueueStreams(0)}, nil, 0, 1},
		{"metadata on the context", nil, func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "x-request-id", "r1")
		}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var counts countingStreams
			c, err := client.Dial(t.Context(), b.Addr, append(tt.opts, client.WithDialOptions(counts.dialOptions()...))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			if _, err := c.Enqueue(ctx, "mail", nil); err != nil {
				t.Fatal(err)
			}
			if s, n := counts.counts(); s != tt.wantStreams || n != tt.wantCalls {
				t.Fatalf("%d streams and %d calls, want %d and %d", s, n, tt.wantStreams, tt.wantCalls)
			}
		})
	}
}

// A client on a connection that serves no streams (the broker's in-process connection) makes
// calls, though asked for streams: an enqueue whose stream could not be opened is made as a
// call, and the client stops trying streams.
func TestEnqueueStreamsOnAConnectionWithoutStreams(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Server.LocalConn(), client.WithEnqueueStreams(2))
	for i := range 3 {
		if _, err := c.Enqueue(t.Context(), "mail", nil); err != nil {
			t.Fatalf("Enqueue %d: %v", i, err)
		}
	}
}

// The client reads the broker's trailer for a stream ended unread under the name the broker
// writes it.
func TestUnreadTrailerNamedAsTheBrokerWritesIt(t *testing.T) {
	if client.UnreadTrailer != server.UnreadTrailer {
		t.Fatalf("the client reads %q, the broker writes %q", client.UnreadTrailer, server.UnreadTrailer)
	}
}
