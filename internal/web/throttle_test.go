package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/web"
)

// A client guessing tokens on the HTTP listener is throttled as on gRPC: past its allowance it
// gets 429 with Retry-After, its tokens unread, on the API and the login form alike. A token
// verified before still works from its address.
func TestHTTPFailedAuthenticationsAreThrottled(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true, AuthFailures: auth.FailureOptions{Rate: 1, Burst: 2}})
	srv := httptest.NewServer(web.Handler(web.Options{Conn: b.Server.LocalConn(), Auth: web.FromTokens(b.Auth), Context: t.Context()}))
	t.Cleanup(srv.Close)
	ab := &authBundle{b: b, url: srv.URL}
	const listQueues = "/api/rpc/ListQueues"
	if code, body, _ := ab.request(t, "GET", listQueues, b.AdminToken, "", nil); code != http.StatusOK {
		t.Fatalf("admin: %d %s", code, body)
	}
	guess := func(i int) string { return fmt.Sprintf("jw_%016x_guess", i) }
	for i := range 2 {
		if code, _, _ := ab.request(t, "GET", listQueues, guess(i), "", nil); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, code)
		}
	}
	code, body, h := ab.request(t, "GET", listQueues, guess(2), "", nil)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" || !strings.Contains(body, "too many failed authentications") {
		t.Fatalf("a third guess: %d %q Retry-After %q, want 429 with Retry-After 1", code, body, h.Get("Retry-After"))
	}
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
	if code, _, _ := ab.request(t, "POST", "/login", "", "token="+guess(3), form); code != http.StatusTooManyRequests {
		t.Fatalf("a guess through the login form: %d, want 429", code)
	}
	b.Clock.Advance(auth.DefaultCacheTTL) // the admin token is read again, not taken for a guess
	for i := range 10 {
		_, _, _ = ab.request(t, "GET", listQueues, guess(10+i), "", nil)
	}
	if code, body, _ := ab.request(t, "GET", listQueues, b.AdminToken, "", nil); code != http.StatusOK {
		t.Fatalf("admin from the throttled address: %d %s", code, body)
	}
	b.Clock.Advance(time.Second)
	if code, _, _ := ab.request(t, "GET", listQueues, guess(4), "", nil); code != http.StatusUnauthorized {
		t.Fatalf("a guess a second later: %d, want 401", code)
	}
}
