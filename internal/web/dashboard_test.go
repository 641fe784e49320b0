package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/web"
)

// authBundle is a broker with authentication on and its dashboard.
type authBundle struct {
	b   *brokertest.Bundle
	url string
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	srv := httptest.NewServer(web.Handler(web.Options{Conn: b.Server.LocalConn(), Ready: b.Broker.Ready,
		Auth: web.FromTokens(b.Auth), Context: t.Context()}))
	t.Cleanup(srv.Close)
	return &authBundle{b: b, url: srv.URL}
}

// request sends one request with an optional bearer token and extra headers.
func (ab *authBundle) request(t *testing.T, method, path, token, body string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, ab.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), resp.Header
}

func TestDashboardNeedsAViewerOrAdminToken(t *testing.T) {
	t.Parallel()
	ab := setupAuth(t)
	viewer := ab.b.Token(auth.RoleViewer, auth.Scope{})
	producer := ab.b.Token(auth.RoleProducer, auth.Scope{})
	admin := ab.b.AdminToken
	const listQueues, pause = "/api/rpc/ListQueues", "/api/rpc/PauseQueue"
	tests := []struct {
		name, method, path, token, body string
		header                          map[string]string
		want                            int
	}{
		{"page without a token goes to login", "GET", "/", "", "", nil, http.StatusSeeOther},
		{"login page is open", "GET", "/login", "", "", nil, http.StatusOK},
		{"health is open", "GET", "/healthz", "", "", nil, http.StatusOK},
		{"API without a token", "GET", listQueues, "", "", nil, http.StatusUnauthorized},
		{"API with a bad token", "GET", listQueues, "jw_nope", "", nil, http.StatusUnauthorized},
		{"API with a producer token", "GET", listQueues, producer, "", nil, http.StatusUnauthorized},
		{"viewer reads", "GET", listQueues, viewer, "", nil, http.StatusOK},
		{"viewer cannot pause", "POST", pause, viewer, `{"queue":"mail"}`, nil, http.StatusForbidden},
		{"admin pauses", "POST", pause, admin, `{"queue":"mail"}`, nil, http.StatusOK},
		{"a cross-site POST is refused", "POST", pause, admin, `{"queue":"mail"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a foreign origin is refused", "POST", pause, admin, `{"queue":"mail"}`, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"a write cannot be made with GET", "GET", pause, admin, "", nil, http.StatusNotFound},
		{"an unknown call", "GET", "/api/rpc/CreateToken", admin, "", nil, http.StatusNotFound},
		{"bad input is the broker's INVALID_ARGUMENT", "POST", pause, admin, `{"queue":"no spaces"}`, nil, http.StatusBadRequest},
	}
	for _, tt := range tests {
		code, body, _ := ab.request(t, tt.method, tt.path, tt.token, tt.body, tt.header)
		if code != tt.want {
			t.Errorf("%s: %s %s = %d %s, want %d", tt.name, tt.method, tt.path, code, body, tt.want)
		}
	}
}

func TestDashboardLoginSetsAStrictHttpOnlyCookie(t *testing.T) {
	t.Parallel()
	ab := setupAuth(t)
	viewer := ab.b.Token(auth.RoleViewer, auth.Scope{})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	resp, err := c.PostForm(ab.url+"/login", url.Values{"token": {"jw_wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/login?failed=1" || len(resp.Cookies()) != 0 {
		t.Errorf("bad token: redirected to %q with cookies %v", loc, resp.Cookies())
	}

	resp, err = c.PostForm(ab.url+"/login", url.Values{"token": {viewer}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/" {
		t.Fatalf("login cookies = %+v, want one HttpOnly SameSite=Strict cookie", cookies)
	}
	resp, err = c.Get(ab.url + "/api/me")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"role":"viewer"`) {
		t.Errorf("/api/me with the cookie = %d %s", resp.StatusCode, body)
	}
	// The broker's own authorisation applies too: a viewer's cookie reads through the
	// admin service, as the viewer's token would over gRPC.
	for _, rpc := range []string{"ListWorkers", "ListBrokers"} {
		resp, err = c.Get(ab.url + "/api/rpc/" + rpc)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s with a viewer cookie = %d", rpc, resp.StatusCode)
		}
	}
	resp, err = c.PostForm(ab.url+"/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = c.Get(ab.url + "/api/me"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/api/me after logout = %d, want 401", resp.StatusCode)
	}
}

func TestDashboardAnswersCarrySecurityHeaders(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	srv := httptest.NewServer(web.Handler(web.Options{Conn: b.Server.LocalConn(), Context: t.Context()}))
	defer srv.Close()
	b.Enqueue(&jobwirev1.JobSpec{Type: "t", Payload: []byte(`"<b>"`)})
	for _, path := range []string{"/", "/api/rpc/GetJob?req=" + url.QueryEscape(`{"id":"1"}`), "/assets/app.js"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
}

// /metrics is open unless MetricsAuth asks for a token, as the dashboard's API does.
func TestMetricsCanBeProtected(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	viewer := b.Token(auth.RoleViewer, auth.Scope{})
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "jobwire_up 1\n") })
	tests := []struct {
		name      string
		protected bool
		token     string
		want      int
	}{
		{"open by default", false, "", http.StatusOK},
		{"protected, no token", true, "", http.StatusUnauthorized},
		{"protected, bad token", true, "jw_nope", http.StatusUnauthorized},
		{"protected, viewer token", true, viewer, http.StatusOK},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(web.Handler(web.Options{Metrics: metrics, MetricsAuth: tt.protected, Auth: web.FromTokens(b.Auth)}))
		ab := &authBundle{b: b, url: srv.URL}
		if code, body, _ := ab.request(t, "GET", "/metrics", tt.token, "", nil); code != tt.want {
			t.Errorf("%s: /metrics = %d %s, want %d", tt.name, code, body, tt.want)
		}
		srv.Close()
	}
}

// statsRequests records the GetStats requests made through it.
type statsRequests struct {
	grpc.ClientConnInterface
	mu   sync.Mutex
	seen []*jobwirev1.GetStatsRequest
}

func (c *statsRequests) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if method == jobwirev1.AdminService_GetStats_FullMethodName {
		c.mu.Lock()
		c.seen = append(c.seen, proto.Clone(args.(*jobwirev1.GetStatsRequest)).(*jobwirev1.GetStatsRequest))
		c.mu.Unlock()
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// The throughput graph's sampler, which reads from the moment the listener starts, asks for
// the counts alone: the whole of GetStats is several reads of the store, one of them counting
// every job finished in the last five minutes.
func TestDashboardSamplerReadsTheCountsOnly(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	conn := &statsRequests{ClientConnInterface: b.Server.LocalConn()}
	srv := httptest.NewServer(web.Handler(web.Options{Conn: conn, Context: t.Context()}))
	defer srv.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn.mu.Lock()
		seen := slices.Clone(conn.seen)
		conn.mu.Unlock()
		if len(seen) > 0 {
			if !seen[0].GetCountsOnly() {
				t.Fatalf("the sampler asked for %v, want counts_only", seen[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the sampler read nothing in 30s")
		}
		time.Sleep(5 * time.Millisecond) // polling for the sampler's first reading
	}
}
