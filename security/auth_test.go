package security

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// rpc is one method of the jobwire.v1 API.
type rpc struct {
	fullMethod string
	streaming  bool
}

// allRPCs lists every method of every service in package jobwire.v1, read from the registered
// descriptors: a service or method added to the API is covered without editing this suite.
func allRPCs(t *testing.T) []rpc {
	t.Helper()
	_ = jobwirev1.File_jobwire_v1_token_service_proto // link every file of the package
	var out []rpc
	protoregistry.GlobalFiles.RangeFilesByPackage("jobwire.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out = append(out, rpc{
					fullMethod: "/" + string(sd.FullName()) + "/" + string(md.Name()),
					streaming:  md.IsStreamingClient() || md.IsStreamingServer(),
				})
			}
		}
		return true
	})
	if len(out) < 20 {
		t.Fatalf("found only %d jobwire.v1 methods; the descriptors are not all registered", len(out))
	}
	return out
}

// call makes one call with an empty request on conn and returns its status code. A stream is
// opened and sent one empty message; its first answer or error decides.
func call(t *testing.T, conn *grpc.ClientConn, r rpc) *status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	if !r.streaming {
		err := conn.Invoke(ctx, r.fullMethod, &emptypb.Empty{}, &emptypb.Empty{})
		return status.Convert(err)
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, r.fullMethod)
	if err != nil {
		return status.Convert(err)
	}
	_ = s.SendMsg(&emptypb.Empty{})
	err = s.RecvMsg(&emptypb.Empty{})
	if errors.Is(err, io.EOF) {
		return status.New(codes.OK, "")
	}
	return status.Convert(err)
}

func TestEveryRPCIsInTheAccessTable(t *testing.T) {
	t.Parallel()
	for _, r := range allRPCs(t) {
		if _, _, _, listed := server.AccessRule(r.fullMethod); !listed {
			t.Errorf("%s has no entry in the access table (server/authz.go): decide which roles may call it", r.fullMethod)
		}
	}
}

// TestAnonymousCallsAreUnauthenticated: with auth on, every RPC without a token, with a
// malformed token, with a made-up token and with a revoked token is UNAUTHENTICATED.
func TestAnonymousCallsAreUnauthenticated(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	revoked := b.Token(auth.RoleAdmin, auth.Scope{})
	p, err := b.Auth.Verify(context.Background(), revoked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Auth.Revoke(context.Background(), p.TokenID); err != nil {
		t.Fatal(err)
	}
	conns := map[string]*grpc.ClientConn{
		"no token":      b.DialToken(""),
		"garbage token": b.DialToken("garbage"),
		"made-up token": b.DialToken("jw_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
		"revoked token": b.DialToken(revoked),
	}
	for _, r := range allRPCs(t) {
		for name, conn := range conns {
			if st := call(t, conn, r); st.Code() != codes.Unauthenticated {
				t.Errorf("%s with %s: %s %q, want UNAUTHENTICATED", r.fullMethod, name, st.Code(), st.Message())
			}
		}
	}
	// Reflection describes the API only to callers with a token.
	ctx := context.Background()
	rs, err := reflectionpb.NewServerReflectionClient(conns["no token"]).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if _, err := rs.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("anonymous reflection: %v, want UNAUTHENTICATED", err)
	}
	// Health checks stay open for load balancers.
	if _, err := healthpb.NewHealthClient(conns["no token"]).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("anonymous health check: %v, want it answered", err)
	}
}

// allowedRoles is the expected role of every call, written out independently of the access
// table so that a change to the table has to be made twice. Admin may call everything.
var allowedRoles = map[string][]auth.Role{
	jobwirev1.ProducerService_Enqueue_FullMethodName:       {auth.RoleProducer},
	jobwirev1.ProducerService_EnqueueStream_FullMethodName: {auth.RoleProducer},
	jobwirev1.ProducerService_EnqueueBatch_FullMethodName:  {auth.RoleProducer},
	jobwirev1.ProducerService_GetJob_FullMethodName:        {auth.RoleProducer, auth.RoleViewer},
	jobwirev1.ProducerService_CancelJob_FullMethodName:     {auth.RoleProducer},
	jobwirev1.WorkerService_Connect_FullMethodName:         {auth.RoleWorker},
	jobwirev1.AdminService_ListJobs_FullMethodName:         {auth.RoleViewer},
	jobwirev1.AdminService_ListDeadJobs_FullMethodName:     {auth.RoleViewer},
	jobwirev1.AdminService_TopDeadErrors_FullMethodName:    {auth.RoleViewer},
	jobwirev1.AdminService_ListQueues_FullMethodName:       {auth.RoleViewer},
	jobwirev1.AdminService_GetStats_FullMethodName:         {auth.RoleViewer},
	jobwirev1.AdminService_ListBreakers_FullMethodName:     {auth.RoleViewer},
	jobwirev1.AdminService_ListWorkers_FullMethodName:      {auth.RoleViewer},
	jobwirev1.AdminService_ListBrokers_FullMethodName:      {auth.RoleViewer},
	jobwirev1.AdminService_ListAuditEvents_FullMethodName:  {auth.RoleViewer},

	jobwirev1.ProducerService_EnqueueGraph_FullMethodName:      {auth.RoleProducer},
	jobwirev1.ProducerService_GetGraph_FullMethodName:          {auth.RoleProducer, auth.RoleViewer},
	jobwirev1.ProducerService_CancelGraph_FullMethodName:       {auth.RoleProducer},
	jobwirev1.ProducerService_CreateBatch_FullMethodName:       {auth.RoleProducer},
	jobwirev1.ProducerService_CloseBatch_FullMethodName:        {auth.RoleProducer},
	jobwirev1.ProducerService_WatchJobs_FullMethodName:         {auth.RoleProducer, auth.RoleViewer},
	jobwirev1.AdminService_ListSchedules_FullMethodName:        {auth.RoleViewer},
	jobwirev1.AdminService_GetSchedule_FullMethodName:          {auth.RoleViewer},
	jobwirev1.AdminService_GetBatch_FullMethodName:             {auth.RoleViewer},
	jobwirev1.AdminService_ListBatches_FullMethodName:          {auth.RoleViewer},
	jobwirev1.AdminService_ListRateLimits_FullMethodName:       {auth.RoleViewer},
	jobwirev1.AdminService_ListConcurrencyRules_FullMethodName: {auth.RoleViewer},
}

// TestRoles: each role may make exactly its calls; any other is PERMISSION_DENIED with a
// sentence naming the roles that would do.
func TestRoles(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	for _, role := range auth.Roles {
		conn := b.DialToken(b.Token(role, auth.Scope{}))
		for _, r := range allRPCs(t) {
			allowed := role == auth.RoleAdmin
			for _, x := range allowedRoles[r.fullMethod] {
				allowed = allowed || x == role
			}
			st := call(t, conn, r)
			switch {
			case allowed && (st.Code() == codes.PermissionDenied || st.Code() == codes.Unauthenticated):
				t.Errorf("%s token calling %s: %s %q, want it let through", role, r.fullMethod, st.Code(), st.Message())
			case !allowed && st.Code() != codes.PermissionDenied:
				t.Errorf("%s token calling %s: %s %q, want PERMISSION_DENIED", role, r.fullMethod, st.Code(), st.Message())
			case !allowed && !containsAll(st.Message(), "needs", "admin token", "has role "+role.String()):
				t.Errorf("%s token calling %s: message %q does not say which role is needed", role, r.fullMethod, st.Message())
			}
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
