package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

// While the broker cannot reach its database (broker.Unreachable) every jobwire.v1 call is
// refused at once with UNAVAILABLE, and the health service says NOT_SERVING, so that clients
// spread over several brokers send their calls to the others. Health checks and reflection
// still answer.

// servedNames are the health service's names: the server as a whole and each service.
var servedNames = []string{"", jobwirev1.ProducerService_ServiceDesc.ServiceName,
	jobwirev1.WorkerService_ServiceDesc.ServiceName, jobwirev1.AdminService_ServiceDesc.ServiceName,
	jobwirev1.TokenService_ServiceDesc.ServiceName}

// setServing sets every name's health status.
func (s *Server) setServing(serving bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !serving {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	// After SetNotServing (shutdown) the health server ignores this.
	for _, name := range servedNames {
		s.health.SetServingStatus(name, st)
	}
	if !serving {
		// A producer's next enqueue then opens a stream where its balancer sends it: another
		// broker, if it has one.
		s.endEnqueueStreams(false)
	}
}

// refusesUnreached reports whether a call of method is refused while the database is silent:
// the broker's own services, not health checks or reflection.
func refusesUnreached(method string) bool { return strings.HasPrefix(method, "/jobwire.v1.") }

// reachUnary refuses the broker's calls while it cannot reach its database.
func (s *Server) reachUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if refusesUnreached(info.FullMethod) {
		if err := s.b.Unreachable(); err != nil {
			return nil, toStatus(err)
		}
	}
	return next(ctx, req)
}

// reachStream refuses worker streams while the broker cannot reach its database.
func (s *Server) reachStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if refusesUnreached(info.FullMethod) {
		if err := s.b.Unreachable(); err != nil {
			return toStatus(err)
		}
	}
	return next(srv, ss)
}

// unreachedStatus is UNAVAILABLE for a call the broker did not hold because it cannot reach its
// database. Its google.rpc.ErrorInfo (brokerset.UnreachedInfo) tells a client whether the call
// may have been applied, so that one spread over several brokers resends elsewhere only what
// cannot be stored twice.
func unreachedStatus(err *broker.UnreachableError) error {
	msg := err.Error() + ": retry it on another broker of the cluster"
	applied := brokerset.AppliedNo
	if err.MaybeApplied {
		msg = err.Error() + ": retry it on another broker with the same idempotency key"
		applied = brokerset.AppliedUnknown
	}
	st, derr := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: brokerset.ReasonUnreached, Domain: brokerset.ErrorDomain,
		Metadata: map[string]string{brokerset.MetaApplied: applied},
	})
	if derr != nil {
		return status.Error(codes.Unavailable, msg)
	}
	return st.Err()
}

// asUnreached finds the *broker.UnreachableError in err.
func asUnreached(err error) (*broker.UnreachableError, bool) {
	var u *broker.UnreachableError
	return u, errors.As(err, &u)
}
