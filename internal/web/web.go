// Package web is the broker's HTTP listener: Prometheus metrics (/metrics), health (/healthz,
// /readyz) and the dashboard with its JSON API. The dashboard reads and changes the broker only
// through the producer and admin services, the same operations the CLI calls, so the two
// cannot disagree.
package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/internal/clock"
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
	// Conn reaches the producer and admin services (server.LocalConn); nil turns the dashboard
	// off.
	Conn grpc.ClientConnInterface
	// Context ends the dashboard's background work (the throughput sampler, which starts with
	// the handler).
	Context context.Context
	// Clock paces and stamps throughput samples; nil means the wall clock.
	Clock clock.Clock
	// SampleEvery is how often the throughput graph's totals are read (0: DefaultSampleEvery).
	SampleEvery time.Duration
	// ListenHost is the host the listener was told to listen on; with Auth nil, requests are
	// answered only for it, IP addresses, localhost and AllowedHosts (see hostGuard).
	ListenHost string
	// AllowedHosts are more host names answered with Auth nil; "*.example.com" allows every
	// name under example.com.
	AllowedHosts []string
}

// readyTimeout bounds the storage read /readyz makes.
const readyTimeout = 2 * time.Second

// Handler returns the listener's handler.
func Handler(opts Options) http.Handler {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
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
	if opts.Conn != nil {
		newDashboard(opts, a).routes(mux)
	}
	if opts.Auth == nil {
		// With tokens required a rebinding page gains nothing: it has no token, and the
		// login cookie belongs to the broker's own host.
		return newHostGuard(mux, opts.ListenHost, opts.AllowedHosts)
	}
	return mux
}
