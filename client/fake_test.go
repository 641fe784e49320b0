package client

import (
	"context"
	"net"
	"path"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// handler answers one RPC of the fake broker.
type handler func(req proto.Message) (proto.Message, error)

// fakeBroker is a real gRPC server on loopback whose RPCs are answered by per-method handlers
// given before it starts (so no handler is written while the server reads it). It records every
// request, which is what the tests check: that the client put each option in the right field.
type fakeBroker struct {
	handlers map[string]handler // by method name, e.g. "Enqueue"

	mu   sync.Mutex
	reqs map[string][]proto.Message
}

// requests returns the requests received for method, oldest first.
func (f *fakeBroker) requests(method string) []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.reqs[method]...)
}

// lastRequest returns the newest request for method and fails the test if there is none.
func (f *fakeBroker) lastRequest(t *testing.T, method string) proto.Message {
	t.Helper()
	reqs := f.requests(method)
	if len(reqs) == 0 {
		t.Fatalf("broker received no %s request", method)
	}
	return reqs[len(reqs)-1]
}

// intercept records the request and answers from the handler table; methods without a
// handler fall through to the Unimplemented servers.
func (f *fakeBroker) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	name := path.Base(info.FullMethod)
	msg := req.(proto.Message)
	f.mu.Lock()
	f.reqs[name] = append(f.reqs[name], msg)
	f.mu.Unlock()
	h, ok := f.handlers[name]
	if !ok {
		return next(ctx, req)
	}
	return h(msg)
}

type testBundle struct {
	client *Client
	broker *fakeBroker
	addr   string
}

// setup starts a fake broker with the given handlers on 127.0.0.1:0 and dials it.
func setup(t *testing.T, handlers map[string]handler) *testBundle {
	t.Helper()
	return setupWith(t, handlers)
}

// setupWith is setup with more options for the fake broker's server (a stream interceptor).
func setupWith(t *testing.T, handlers map[string]handler, opts ...grpc.ServerOption) *testBundle {
	t.Helper()
	fb := &fakeBroker{handlers: handlers, reqs: map[string][]proto.Message{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.UnaryInterceptor(fb.intercept)}, opts...)...)
	jobwirev1.RegisterProducerServiceServer(srv, jobwirev1.UnimplementedProducerServiceServer{})
	jobwirev1.RegisterAdminServiceServer(srv, jobwirev1.UnimplementedAdminServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	c, err := Dial(t.Context(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &testBundle{client: c, broker: fb, addr: lis.Addr().String()}
}

// reply is a handler that always answers resp.
func reply(resp proto.Message) handler {
	return func(proto.Message) (proto.Message, error) { return resp, nil }
}

// fail is a handler that always answers err.
func fail(err error) handler {
	return func(proto.Message) (proto.Message, error) { return nil, err }
}
