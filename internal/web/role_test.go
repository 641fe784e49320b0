package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/web"
)

// recordingConn passes calls on to conn and records the methods of all but the throughput
// sampler's GetStats.
type recordingConn struct {
	grpc.ClientConnInterface
	mu    sync.Mutex
	calls []string
}

func (c *recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if method != jobwirev1.AdminService_GetStats_FullMethodName {
		c.mu.Lock()
		c.calls = append(c.calls, method)
		c.mu.Unlock()
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

func (c *recordingConn) taken() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

// The dashboard refuses a viewer's write itself, before it calls the broker: its role check
// does not lean on the broker's, which a viewer token would also fail.
func TestDashboardRefusesAViewersWriteBeforeCallingTheBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	conn := &recordingConn{ClientConnInterface: b.Server.LocalConn()}
	srv := httptest.NewServer(web.Handler(web.Options{Conn: conn, Auth: web.FromTokens(b.Auth), Context: t.Context()}))
	t.Cleanup(srv.Close)
	post := func(token, method, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+"/api/rpc/"+method, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}

	viewer := b.Token(auth.RoleViewer, auth.Scope{})
	for _, method := range []string{"PauseQueue", "ResumeQueue", "SetQueueLimit", "CancelJob", "RequeueDeadJobs",
		"PurgeDeadJobs", "ResetBreaker", "ForceBreaker"} {
		code, msg := post(viewer, method, `{}`)
		if code != http.StatusForbidden || !strings.Contains(msg, "this needs an admin token") {
			t.Errorf("viewer POST %s = %d %q, want 403 from the dashboard", method, code, msg)
		}
		if calls := conn.taken(); len(calls) != 0 {
			t.Errorf("viewer POST %s called the broker: %v", method, calls)
		}
	}
	// The recording sees the calls the dashboard makes.
	if code, msg := post(b.AdminToken, "PauseQueue", `{"queue":"mail"}`); code != http.StatusOK {
		t.Fatalf("admin POST PauseQueue = %d %q", code, msg)
	}
	if calls := conn.taken(); len(calls) != 1 || calls[0] != jobwirev1.AdminService_PauseQueue_FullMethodName {
		t.Errorf("admin POST PauseQueue made the calls %v, want one PauseQueue", calls)
	}
}
