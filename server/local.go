package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// LocalConn is a connection to this server's producer and admin services inside the process,
// for the HTTP dashboard: its calls run the same handlers, with the same request validation,
// as calls over the network, so the dashboard and the CLI cannot disagree. Streams are not
// served.
func (s *Server) LocalConn() grpc.ClientConnInterface { return s.local }

// localConn implements grpc.ServiceRegistrar, to collect the unary methods, and
// grpc.ClientConnInterface, to call them.
type localConn struct {
	intercept grpc.UnaryServerInterceptor
	methods   map[string]localMethod
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

func newLocalConn(intercept grpc.UnaryServerInterceptor) *localConn {
	return &localConn{intercept: intercept, methods: make(map[string]localMethod)}
}

// RegisterService implements grpc.ServiceRegistrar.
func (c *localConn) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
}

// Invoke implements grpc.ClientConnInterface. The request is copied, so the handler cannot
// change the caller's message, and the response is copied into reply.
func (c *localConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "method %s is not served in process", method)
	}
	in, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "request %T is not a protobuf message", args)
	}
	dec := func(dst any) error {
		msg, ok := dst.(proto.Message)
		if !ok {
			return fmt.Errorf("request %T is not a protobuf message", dst)
		}
		proto.Merge(msg, in)
		return nil
	}
	// Interceptors find the method as on the network (grpc.Method), for the access rules; the
	// audit trail records the call as the dashboard's, the one user of the connection.
	ctx = grpc.NewContextWithServerTransportStream(ctx, localStream(method))
	ctx = context.WithValue(ctx, inProcessKey{}, true)
	out, err := m.handler(m.impl, ctx, dec, c.intercept)
	if err != nil {
		return err
	}
	dst, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "response %T is not a protobuf message", reply)
	}
	proto.Reset(dst)
	proto.Merge(dst, out.(proto.Message))
	return nil
}

// NewStream implements grpc.ClientConnInterface; no stream is served in process.
func (c *localConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "streams are not served in process")
}

// chainUnary makes one interceptor of several, the first outermost, as grpc.ChainUnaryInterceptor
// does for a server.
func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return bindUnary(ints, info, handler)(ctx, req)
	}
}

// bindUnary is handler behind the interceptors ints, the first outermost, for calls of info:
// bound once, it serves every request of a stream of calls (EnqueueStream) without chaining
// them again per request.
func bindUnary(ints []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
	next := handler
	for i := len(ints) - 1; i >= 0; i-- {
		in, h := ints[i], next
		next = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, h) }
	}
	return next
}

// localStream is the grpc.ServerTransportStream of a call made without a call of its own, in
// process or as a request of EnqueueStream: it names the method and drops headers and
// trailers, which have no one to go to.
type localStream string

func (s localStream) Method() string             { return string(s) }
func (localStream) SetHeader(metadata.MD) error  { return nil }
func (localStream) SendHeader(metadata.MD) error { return nil }
func (localStream) SetTrailer(metadata.MD) error { return nil }
