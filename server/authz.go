package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/job"
)

// rule is who may make one call when auth is on. Admin tokens may make every call.
type rule struct {
	// public calls need no token (health checks, for load balancers).
	public bool
	// anyRole: any valid token will do.
	anyRole bool
	// roles besides admin that may make the call.
	roles []auth.Role
}

var (
	producerOnly   = rule{roles: []auth.Role{auth.RoleProducer}}
	producerViewer = rule{roles: []auth.Role{auth.RoleProducer, auth.RoleViewer}}
	workerOnly     = rule{roles: []auth.Role{auth.RoleWorker}}
	viewer         = rule{roles: []auth.Role{auth.RoleViewer}}
	adminOnly      = rule{}
)

// access is the one table of who may call what. A jobwire.v1 call missing here is admin only,
// and a test fails until it is added, so a new RPC is never open by accident. Producer and
// worker calls are further limited by the token's scope (authorizeRequest, authorizeHello).
var access = map[string]rule{
	jobwirev1.ProducerService_Enqueue_FullMethodName:       producerOnly,
	jobwirev1.ProducerService_EnqueueStream_FullMethodName: producerOnly,
	jobwirev1.ProducerService_EnqueueBatch_FullMethodName:  producerOnly,
	jobwirev1.ProducerService_GetJob_FullMethodName:        producerViewer,
	jobwirev1.ProducerService_CancelJob_FullMethodName:     producerOnly,
	jobwirev1.ProducerService_EnqueueGraph_FullMethodName:  producerOnly,
	jobwirev1.ProducerService_GetGraph_FullMethodName:      producerViewer,
	jobwirev1.ProducerService_CancelGraph_FullMethodName:   producerOnly,
	jobwirev1.ProducerService_CreateBatch_FullMethodName:   producerOnly,
	jobwirev1.ProducerService_CloseBatch_FullMethodName:    producerOnly,
	jobwirev1.ProducerService_WatchJobs_FullMethodName:     producerViewer,

	jobwirev1.WorkerService_Connect_FullMethodName: workerOnly,

	jobwirev1.AdminService_ListJobs_FullMethodName:          viewer,
	jobwirev1.AdminService_ListDeadJobs_FullMethodName:      viewer,
	jobwirev1.AdminService_TopDeadErrors_FullMethodName:     viewer,
	jobwirev1.AdminService_ListQueues_FullMethodName:        viewer,
	jobwirev1.AdminService_GetStats_FullMethodName:          viewer,
	jobwirev1.AdminService_ListBreakers_FullMethodName:      viewer,
	jobwirev1.AdminService_ListWorkers_FullMethodName:       viewer,
	jobwirev1.AdminService_ListBrokers_FullMethodName:       viewer,
	jobwirev1.AdminService_ListAuditEvents_FullMethodName:   viewer,
	jobwirev1.AdminService_ListSchedules_FullMethodName:     viewer,
	jobwirev1.AdminService_GetSchedule_FullMethodName:       viewer,
	jobwirev1.AdminService_AddSchedule_FullMethodName:       adminOnly,
	jobwirev1.AdminService_UpdateSchedule_FullMethodName:    adminOnly,
	jobwirev1.AdminService_RemoveSchedule_FullMethodName:    adminOnly,
	jobwirev1.AdminService_PauseSchedule_FullMethodName:     adminOnly,
	jobwirev1.AdminService_ResumeSchedule_FullMethodName:    adminOnly,
	jobwirev1.AdminService_TriggerSchedule_FullMethodName:   adminOnly,
	jobwirev1.AdminService_BackfillSchedule_FullMethodName:  adminOnly,
	jobwirev1.AdminService_GetBatch_FullMethodName:          viewer,
	jobwirev1.AdminService_ListBatches_FullMethodName:       viewer,
	jobwirev1.AdminService_RequeueDeadJobs_FullMethodName:   adminOnly,
	jobwirev1.AdminService_PurgeDeadJobs_FullMethodName:     adminOnly,
	jobwirev1.AdminService_PurgeFinishedJobs_FullMethodName: adminOnly,
	jobwirev1.AdminService_PauseQueue_FullMethodName:        adminOnly,
	jobwirev1.AdminService_ResumeQueue_FullMethodName:       adminOnly,
	jobwirev1.AdminService_SetQueueLimit_FullMethodName:     adminOnly,
	jobwirev1.AdminService_ListRateLimits_FullMethodName:    viewer,
	jobwirev1.AdminService_SetRateLimit_FullMethodName:      adminOnly,
	jobwirev1.AdminService_RemoveRateLimit_FullMethodName:   adminOnly,
	jobwirev1.AdminService_ResetBreaker_FullMethodName:      adminOnly,
	jobwirev1.AdminService_ForceBreaker_FullMethodName:      adminOnly,
	jobwirev1.AdminService_RunJobNow_FullMethodName:         adminOnly,
	jobwirev1.AdminService_RetryJobNow_FullMethodName:       adminOnly,
	jobwirev1.AdminService_DeleteJob_FullMethodName:         adminOnly,
	jobwirev1.AdminService_SetJobPriority_FullMethodName:    adminOnly,

	jobwirev1.AdminService_ListConcurrencyRules_FullMethodName:  viewer,
	jobwirev1.AdminService_SetConcurrencyRule_FullMethodName:    adminOnly,
	jobwirev1.AdminService_RemoveConcurrencyRule_FullMethodName: adminOnly,

	jobwirev1.TokenService_CreateToken_FullMethodName: adminOnly,
	jobwirev1.TokenService_ListTokens_FullMethodName:  adminOnly,
	jobwirev1.TokenService_RevokeToken_FullMethodName: adminOnly,
}

// serviceAccess covers the standard services by name: health checks are open so that load
// balancers and orchestrators need no token; server reflection only describes the API and takes
// any valid token.
var serviceAccess = map[string]rule{
	healthpb.Health_ServiceDesc.ServiceName:    {public: true},
	"grpc.reflection.v1.ServerReflection":      {anyRole: true},
	"grpc.reflection.v1alpha.ServerReflection": {anyRole: true},
}

// AccessRule describes who may call fullMethod, for tests and docs: "public", "any token", or
// the roles besides admin (an empty list: admin only).
func AccessRule(fullMethod string) (public, anyRole bool, roles []auth.Role, listed bool) {
	r, listed := ruleFor(fullMethod)
	return r.public, r.anyRole, r.roles, listed
}

func ruleFor(fullMethod string) (rule, bool) {
	if r, ok := access[fullMethod]; ok {
		return r, true
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if r, ok := serviceAccess[service]; ok {
		return r, true
	}
	return adminOnly, false
}

func (r rule) allows(role auth.Role) bool {
	if r.anyRole || role == auth.RoleAdmin {
		return true
	}
	for _, x := range r.roles {
		if x == role {
			return true
		}
	}
	return false
}

// needs words the roles of a rule for a PERMISSION_DENIED message.
func (r rule) needs() string {
	names := make([]string, 0, len(r.roles)+1)
	for _, x := range r.roles {
		names = append(names, x.String())
	}
	names = append(names, auth.RoleAdmin.String())
	if len(names) == 1 {
		return "an admin token"
	}
	return "a " + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1] + " token"
}

// authenticate is the auth interceptors' function: it finds the call's rule, verifies the
// bearer token and checks the token's role. The principal rides on the returned context.
func (s *Server) authenticate(ctx context.Context) (context.Context, error) {
	method, _ := grpc.Method(ctx)
	r, _ := ruleFor(method)
	if r.public {
		return ctx, nil
	}
	token, err := grpcauth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return nil, status.Error(codes.Unauthenticated,
			"this broker requires a token: send the metadata \"authorization: Bearer <token>\" (jobwire --token or JOBWIRE_TOKEN)")
	}
	p, err := s.auth.VerifyFrom(ctx, peerIP(ctx), token)
	if errors.Is(err, auth.ErrUnauthenticated) {
		return nil, status.Error(codes.Unauthenticated, "the token is unknown, malformed or revoked")
	}
	var throttled *auth.ThrottledError
	if errors.As(err, &throttled) {
		return nil, status.Errorf(codes.ResourceExhausted, "%v (failed authentications are limited per client address)", throttled)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if !r.allows(p.Role) {
		return nil, status.Errorf(codes.PermissionDenied, "%s needs %s; token %s has role %s",
			strings.TrimPrefix(method, "/jobwire.v1."), r.needs(), p.TokenID, p.Role)
	}
	return auth.WithPrincipal(ctx, p), nil
}

// trackStream ends a stream whose token is revoked while it is open: the stream's context is
// cancelled and the caller gets UNAUTHENTICATED. Leases the stream held are handled as on any
// disconnect.
func (s *Server) trackStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	p, ok := auth.PrincipalFrom(ss.Context())
	if !ok {
		return next(srv, ss)
	}
	ctx, release := s.auth.Track(ss.Context(), p)
	defer release()
	wrapped := middleware.WrapServerStream(ss)
	wrapped.WrappedContext = ctx
	err := next(srv, wrapped)
	if errors.Is(context.Cause(ctx), auth.ErrRevoked) {
		return status.Errorf(codes.Unauthenticated, "token %s was revoked; the stream is closed", p.TokenID)
	}
	return err
}

// authorizeUnary checks a producer token's scope against what a call touches: the queue and
// type of each job enqueued, or of the job read or cancelled.
func (s *Server) authorizeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := s.authorizeRequest(ctx, req); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (s *Server) authorizeRequest(ctx context.Context, req any) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || p.Role != auth.RoleProducer || p.Scope.Unrestricted() {
		return nil
	}
	switch r := req.(type) {
	case *jobwirev1.EnqueueRequest:
		return checkJobScope(p, "job", r.GetJob().GetQueue(), r.GetJob().GetType())
	case *jobwirev1.EnqueueBatchRequest:
		for i, spec := range r.GetJobs() {
			if err := checkJobScope(p, fmt.Sprintf("jobs[%d]", i), spec.GetQueue(), spec.GetType()); err != nil {
				return err
			}
		}
		return authorizeBatch(p, r)
	case *jobwirev1.CreateBatchRequest:
		return authorizeBatch(p, r)
	case *jobwirev1.GetJobRequest:
		return s.checkStoredJobScope(ctx, p, r.GetId())
	case *jobwirev1.CancelJobRequest:
		return s.checkStoredJobScope(ctx, p, r.GetId())
	case *jobwirev1.EnqueueGraphRequest:
		return authorizeGraph(p, r)
	case *jobwirev1.GetGraphRequest:
		return s.checkGraphScope(ctx, p, r.GetGraphId())
	case *jobwirev1.CancelGraphRequest:
		return s.checkGraphScope(ctx, p, r.GetGraphId())
	case *jobwirev1.WatchJobsRequest:
		for _, id := range r.GetIds() {
			if err := s.checkStoredJobScope(ctx, p, id); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkJobScope(p auth.Principal, field, queue, typ string) error {
	queue = job.QueueOrDefault(queue)
	if !p.Scope.AllowsQueue(queue) || !p.Scope.AllowsType(typ) {
		return status.Errorf(codes.PermissionDenied, "%s: job type %q in queue %q is outside token %s's scope (%s); it needs a producer token whose scope covers them",
			field, typ, queue, p.TokenID, p.Scope)
	}
	return nil
}

// checkStoredJobScope lets a scoped producer see or cancel only jobs inside its scope. An
// unknown id passes, for the handler to answer NOT_FOUND.
func (s *Server) checkStoredJobScope(ctx context.Context, p auth.Principal, id int64) error {
	j, err := s.b.Get(ctx, id)
	if errors.Is(err, broker.ErrNotFound) {
		return nil
	}
	if err != nil {
		return toStatus(err)
	}
	return checkJobScope(p, "id", j.Queue, j.Type)
}

// authorizeHello checks a worker token's scope against the job types and queues a Hello names.
// A token limited to some queues must name them: an empty queue list means every queue, which
// such a token may not serve (patterns cannot stand in for queue names).
func authorizeHello(ctx context.Context, h *jobwirev1.Hello) error {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok || p.Role == auth.RoleAdmin || p.Scope.Unrestricted() {
		return nil
	}
	for i, t := range h.GetJobTypes() {
		if !p.Scope.AllowsType(t) {
			return status.Errorf(codes.PermissionDenied, "hello.job_types[%d]: job type %q is outside token %s's scope (%s); it needs a worker token whose scope covers it",
				i, t, p.TokenID, p.Scope)
		}
	}
	if len(p.Scope.Queues) > 0 && len(h.GetQueues()) == 0 {
		return status.Errorf(codes.PermissionDenied, "hello.queues: token %s may serve only queues %s; list the queues to serve in Hello",
			p.TokenID, strings.Join(p.Scope.Queues, ", "))
	}
	for i, q := range h.GetQueues() {
		if !p.Scope.AllowsQueue(q) {
			return status.Errorf(codes.PermissionDenied, "hello.queues[%d]: queue %q is outside token %s's scope (%s); it needs a worker token whose scope covers it",
				i, q, p.TokenID, p.Scope)
		}
	}
	return nil
}
