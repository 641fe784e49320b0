package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/web"
)

func hostStatus(t *testing.T, url, host string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/api/rpc/ListQueues", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// With auth off the listener answers for the host it was told to listen on; other names get
// 421.
func TestHostGuardAllowsTheListenHost(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	srv := httptest.NewServer(web.Handler(web.Options{Conn: b.Server.LocalConn(), Context: t.Context(), ListenHost: "Jobwire.Internal"}))
	t.Cleanup(srv.Close)
	if code := hostStatus(t, srv.URL, "jobwire.internal:7071"); code != http.StatusOK {
		t.Errorf("Host jobwire.internal: %d, want 200", code)
	}
	if code := hostStatus(t, srv.URL, "other.internal:7071"); code != http.StatusMisdirectedRequest {
		t.Errorf("Host other.internal: %d, want 421", code)
	}
}

// With auth on, every name is answered: the token protects the listener, and a rebinding page
// has none (the login cookie belongs to the broker's own name).
func TestHostGuardOffWithAuth(t *testing.T) {
	t.Parallel()
	ab := setupAuth(t)
	if code := hostStatus(t, ab.url, "jobwire.example.com"); code != http.StatusUnauthorized {
		t.Errorf("Host jobwire.example.com without a token: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", ab.url+"/api/rpc/ListQueues", nil)
	req.Host = "jobwire.example.com"
	req.Header.Set("Authorization", "Bearer "+ab.b.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("Host jobwire.example.com with an admin token: %d %s, want 200 JSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
