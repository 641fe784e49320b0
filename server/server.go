// Package server exposes the broker over gRPC: the producer, worker and admin services, the
// standard health service and server reflection. Handlers decode, call the broker, encode;
// toStatus is the one place that maps domain errors to status codes.
package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
)

// Options configure the gRPC server.
type Options struct {
	Logger *slog.Logger
	Limits Limits
	Clock  clock.Clock
	// Auth keeps the API tokens (TokenService). Nil: the broker keeps none.
	Auth *auth.Authenticator
	// RequireAuth makes every call but health checks present a valid token with a role
	// allowed to make it (see access in authz.go). It needs Auth.
	RequireAuth bool
	// ServerOptions are added to the gRPC server's: its transport credentials, and metrics or
	// tracing interceptors, which come before the server's own so that they see every call.
	ServerOptions []grpc.ServerOption
	// RequestInterceptors also see each request of a stream of calls (EnqueueStream) as the
	// call it stands for, before the server's own interceptors: the unary interceptors of
	// ServerOptions that count or time calls (gRPC metrics), so a stream's requests are
	// counted as calls of Enqueue.
	RequestInterceptors []grpc.UnaryServerInterceptor
	// Transport bounds connections and streams. Zero: DefaultTransport.
	Transport Transport
}

// Server holds the services and the health status.
type Server struct {
	b      *broker.Broker
	log    *slog.Logger
	limits Limits
	clk    clock.Clock
	health *health.Server
	auth   *auth.Authenticator
	local  *localConn
	// requests is what each request of a stream of calls (EnqueueStream) goes through, as the
	// call it stands for would: Options.RequestInterceptors, then the interceptors of a unary
	// call.
	requests []grpc.UnaryServerInterceptor
	// streamsEnd ends the open enqueue streams between requests (EnqueueStream): closed, and
	// replaced, when the broker stops serving because it cannot reach its database; closed
	// for good at shutdown (SetNotServing).
	streamsMu   sync.Mutex
	streamsEnd  chan struct{}
	streamsDone bool
	// streams counts the open worker streams (Limits.MaxWorkerStreams).
	streams atomic.Int64
	// tokenStreams counts them by token (Limits.MaxWorkerStreamsPerToken).
	tokenStreams tokenStreams
	// maxToWorker is the largest message sent to a worker: the largest the broker reads,
	// at least MaxWorkerMessageBytes. An operator who lets payloads or results past 4 MiB in
	// lets them out to the workers, whose libraries must then read as much.
	maxToWorker int
}

// New builds a *grpc.Server serving b, with logging, panic recovery and request validation.
func New(b *broker.Broker, opts Options) (*grpc.Server, *Server) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Limits == (Limits{}) {
		opts.Limits = DefaultLimits()
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RequireAuth && opts.Auth == nil {
		panic("server: RequireAuth needs an Authenticator")
	}
	s := &Server{b: b, log: opts.Logger, limits: opts.Limits, clk: opts.Clock, health: health.NewServer(), auth: opts.Auth,
		streamsEnd: make(chan struct{})}
	calls := callLog{log: opts.Logger}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		opts.Logger.ErrorContext(ctx, "panic in handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error: %v", p)
	})
	unary := []grpc.UnaryServerInterceptor{
		calls.unary,
		recovery.UnaryServerInterceptor(recoverOpt),
		utf8Unary,
	}
	stream := []grpc.StreamServerInterceptor{
		calls.stream,
		recovery.StreamServerInterceptor(recoverOpt),
		utf8Stream,
	}
	if opts.RequireAuth {
		// Who the caller is comes first, so an anonymous caller learns nothing from
		// validation; the scope is checked once the request is known to be well formed.
		unary = append(unary, grpcauth.UnaryServerInterceptor(s.authenticate))
		stream = append(stream, grpcauth.StreamServerInterceptor(s.authenticate), s.trackStream)
	}
	// The handlers learn who calls (actorUnary) once the caller is known and the request valid.
	unary = append(unary, s.validateUnary, s.actorUnary)
	if opts.RequireAuth {
		unary = append(unary, s.authorizeUnary)
	}
	unary = append(unary, s.reachUnary)
	stream = append(stream, s.reachStream)
	if opts.Transport == (Transport{}) {
		opts.Transport = DefaultTransport()
	}
	s.maxToWorker = max(MaxWorkerMessageBytes, opts.Transport.MaxRecvMsgSize)
	serverOpts := append(slices.Clone(opts.ServerOptions), opts.Transport.ServerOptions()...)
	serverOpts = append(serverOpts, grpc.ForceServerCodecV2(newUTF8Codec()))
	gs := grpc.NewServer(append(serverOpts,
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)...)
	s.requests = append(slices.Clone(opts.RequestInterceptors), unary...)
	s.local = newLocalConn(chainUnary(unary))
	for _, r := range []grpc.ServiceRegistrar{gs, s.local} {
		jobwirev1.RegisterProducerServiceServer(r, &producer{Server: s})
		jobwirev1.RegisterAdminServiceServer(r, &admin{Server: s})
	}
	jobwirev1.RegisterWorkerServiceServer(gs, &workers{Server: s})
	jobwirev1.RegisterTokenServiceServer(gs, &tokens{Server: s})
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
	s.setServing(b.Unreachable() == nil)
	b.WatchReach(func(unreachable bool) { s.setServing(!unreachable) })
	return gs, s
}

// SetNotServing marks every service NOT_SERVING (at shutdown), so load balancers stop sending,
// and ends the enqueue streams between requests (EnqueueStream), which a graceful stop would
// otherwise wait for.
func (s *Server) SetNotServing() {
	s.health.Shutdown()
	s.endEnqueueStreams(true)
}

// endEnqueueStreams ends the enqueue streams open now; for good (shutdown) when final.
func (s *Server) endEnqueueStreams(final bool) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streamsDone {
		return
	}
	close(s.streamsEnd)
	s.streamsDone = final
	if !final {
		s.streamsEnd = make(chan struct{})
	}
}

// enqueueStreamsEnd is closed when the enqueue streams open now are to end.
func (s *Server) enqueueStreamsEnd() <-chan struct{} {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	return s.streamsEnd
}

// validateUnary answers a request that breaks a rule with INVALID_ARGUMENT naming the field,
// before any handler runs.
func (s *Server) validateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := s.validate(req); err != nil {
		return nil, err
	}
	return next(ctx, req)
}
