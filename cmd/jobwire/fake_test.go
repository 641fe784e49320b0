package main

import (
	"bytes"
	"context"
	"net"
	"path"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// testNow is the clock the commands see in tests, so --since windows are exact.
var testNow = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// handler answers one RPC of the fake broker.
type handler func(req proto.Message) (proto.Message, error)

// fakeBroker is a real gRPC server on loopback. Handlers are fixed before it starts; every
// request is recorded so tests can check what the command sent.
type fakeBroker struct {
	addr     string
	handlers map[string]handler

	mu   sync.Mutex
	reqs map[string][]proto.Message
}

func (f *fakeBroker) requests(method string) []proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]proto.Message(nil), f.reqs[method]...)
}

func (f *fakeBroker) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	name := path.Base(info.FullMethod)
	f.mu.Lock()
	f.reqs[name] = append(f.reqs[name], req.(proto.Message))
	f.mu.Unlock()
	if h, ok := f.handlers[name]; ok {
		return h(req.(proto.Message))
	}
	return next(ctx, req)
}

// startBroker serves the handlers on 127.0.0.1:0 until the test ends.
func startBroker(t *testing.T, handlers map[string]handler) *fakeBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{addr: lis.Addr().String(), handlers: handlers, reqs: map[string][]proto.Message{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(fb.intercept))
	jobwirev1.RegisterProducerServiceServer(srv, jobwirev1.UnimplementedProducerServiceServer{})
	jobwirev1.RegisterAdminServiceServer(srv, jobwirev1.UnimplementedAdminServiceServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return fb
}

func reply(resp proto.Message) handler {
	return func(proto.Message) (proto.Message, error) { return resp, nil }
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs one command line in-process with the given environment variables.
func runCLI(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{
		stdout: &stdout,
		stderr: &stderr,
		getenv: func(k string) string { return environ[k] },
		now:    func() time.Time { return testNow },
	}
	code := e.run(t.Context(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// runAt runs a command against the broker at addr.
func runAt(t *testing.T, addr string, args ...string) result {
	t.Helper()
	return runCLI(t, nil, append(args, "--addr", addr)...)
}
