package app_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/app"
	"github.com/jobwire/jobwire/internal/config"
)

// runBroker starts Run on free loopback ports and returns its addresses; the broker stops at
// cleanup.
func runBroker(t *testing.T, edit func(*config.Config)) app.Addrs {
	t.Helper()
	cfg := config.Defaults()
	cfg.Listen, cfg.HTTPListen, cfg.DB = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(t.TempDir(), "j.db")
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan app.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a app.Addrs) { addrs <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("Run ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("broker did not start")
	}
	return app.Addrs{}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestHTTPListenerServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	a := runBroker(t, nil)
	base := "http://" + a.HTTP.String()
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"jobwire_build_info{", "jobwire_workers_connected 0", "grpc_server_started_total{",
		"go_goroutines", "jobwire_storage_commit_duration_seconds_bucket"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

func TestMetricsOff(t *testing.T) {
	t.Parallel()
	a := runBroker(t, func(c *config.Config) { c.Metrics = false })
	if code, _ := get(t, "http://"+a.HTTP.String()+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics = %d with metrics off, want 404", code)
	}
}

func TestHTTPListenerOff(t *testing.T) {
	t.Parallel()
	a := runBroker(t, func(c *config.Config) { c.HTTPListen = config.HTTPOff })
	if a.HTTP != nil {
		t.Errorf("HTTP listening on %s with http_listen off", a.HTTP)
	}
}

// A taken HTTP port stops the broker with an error naming the address, before it serves.
func TestHTTPListenerPortTaken(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := config.Defaults()
	cfg.Listen, cfg.HTTPListen, cfg.DB = "127.0.0.1:0", taken.Addr().String(), filepath.Join(t.TempDir(), "j.db")
	err = app.Run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(app.Addrs) {
		t.Error("broker announced it was ready")
	})
	if err == nil || !strings.Contains(err.Error(), "cannot listen on "+taken.Addr().String()+" for HTTP") {
		t.Fatalf("Run = %v, want an error naming the taken HTTP address", err)
	}
}
