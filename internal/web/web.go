// Package web is the broker's HTTP listener: Prometheus metrics (/metrics) and health
// (/healthz, /readyz).
package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// Options configure the HTTP handler. Every field is optional.
type Options struct {
	// Metrics serves /metrics; nil answers 404 there (metrics turned off).
	Metrics http.Handler
	// MetricsAuth makes /metrics need a viewer or admin token when Auth is set.
	MetricsAuth bool
	// Ready reports whether the broker accepts work, for /readyz.
	Ready func(ctx context.Context) error
	// Auth checks tokens; nil means authentication is off and every caller is an admin.
	Auth Authenticator
	// Log receives request errors; nil means slog.Default().
	Log *slog.Logger
}

// readyTimeout bounds the storage read /readyz makes.
const readyTimeout = 2 * time.Second

// Handler returns the listener's handler.
func Handler(opts Options) http.Handler {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if opts.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := opts.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	a := &authn{auth: opts.Auth, log: opts.Log}
	if opts.Metrics != nil {
		h := opts.Metrics
		if opts.MetricsAuth {
			h = a.require(RoleViewer, h)
		}
		mux.Handle("GET /metrics", h)
	}
	return mux
}
