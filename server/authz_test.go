package server_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A call that reaches the server but is missing from the access table is admin only: a new RPC
// is never open to every token by accident. The server takes any method here (an unknown
// service handler that counts its calls), so the calls are real ones the auth interceptor
// judges, not a lookup in the table.
func TestUnlistedCallsAreAdminOnly(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	b := brokertest.New(t, brokertest.Options{RequireAuth: true, ServerOptions: []grpc.ServerOption{
		grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
			reached.Add(1)
			if err := s.RecvMsg(&emptypb.Empty{}); err != nil {
				return err
			}
			return s.SendMsg(&emptypb.Empty{})
		}),
	}})
	unlisted := []string{
		"/jobwire.v1.AdminService/DropEverything", // a method of a listed service
		"/jobwire.v1.NewService/Do",               // a service of the API the table does not know
		"/other.v1.Service/Call",                  // a service outside the API
	}
	for _, role := range auth.Roles {
		conn := b.DialToken(b.Token(role, auth.Scope{}))
		for _, method := range unlisted {
			before := reached.Load()
			err := conn.Invoke(context.Background(), method, &emptypb.Empty{}, &emptypb.Empty{})
			calledHandler := reached.Load() > before
			switch {
			case role == auth.RoleAdmin && (err != nil || !calledHandler):
				t.Errorf("admin calling %s: %v (handler reached: %t), want it let through", method, err, calledHandler)
			case role != auth.RoleAdmin && (status.Code(err) != codes.PermissionDenied || calledHandler):
				t.Errorf("%s token calling %s: %v (handler reached: %t), want PERMISSION_DENIED before the handler",
					role, method, err, calledHandler)
			}
		}
	}
}
