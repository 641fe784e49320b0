package security

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/config"
)

// TestDashboardNeedsTokensWhenAuthIsOn: with auth on, the HTTP listener's dashboard and API
// answer an anonymous caller 401 and a producer 403; a viewer reads, only an admin acts.
func TestDashboardNeedsTokensWhenAuthIsOn(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DB = filepath.Join(t.TempDir(), "jobwire.db")
	cfg.Auth = true
	cfg.BootstrapToken = "dashboard-test-admin-token-0123456789"
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan app.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a app.Addrs) { addrs <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	var a app.Addrs
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("broker stopped: %v", err)
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("broker not ready")
	}

	c, err := client.Dial(ctx, a.GRPC.String(), client.WithToken(cfg.BootstrapToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tokens := jobwirev1.NewTokenServiceClient(c.Conn())
	mint := func(role jobwirev1.TokenRole) string {
		res, err := tokens.CreateToken(ctx, &jobwirev1.CreateTokenRequest{Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return res.GetToken()
	}
	viewer, producer := mint(jobwirev1.TokenRole_TOKEN_ROLE_VIEWER), mint(jobwirev1.TokenRole_TOKEN_ROLE_PRODUCER)

	get := func(path, token string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HTTP.String()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"jw_0000000000000000_made-up", http.StatusUnauthorized},
		{producer, http.StatusUnauthorized},
		{viewer, http.StatusOK},
		{cfg.BootstrapToken, http.StatusOK},
	} {
		if got := get("/api/me", c.token); got != c.want {
			t.Errorf("GET /api/me with token %q: %d, want %d", strings.SplitN(c.token, "_", 3)[0], got, c.want)
		}
	}
}
