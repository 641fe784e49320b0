package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/internal/tlsreload"
	"github.com/jobwire/jobwire/store/postgres"
)

// SetupError is a setting Run could not use (a TLS file that does not load, a bootstrap
// token that is too short): the operator's input was wrong.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// loadTLS loads the certificate files and starts watching them for a new certificate until
// ctx ends. It returns nil when TLS is off.
func loadTLS(ctx context.Context, cfg config.TLS, log *slog.Logger) (*tlsreload.Reloader, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	r, err := tlsreload.New(tlsreload.Files{Cert: cfg.Cert, Key: cfg.Key, ClientCA: cfg.ClientCA}, log)
	if err != nil {
		return nil, &SetupError{Err: err}
	}
	r.CheckExpiry(time.Now())
	r.Watch(ctx, clock.Real{}, cfg.ReloadInterval, hangups(ctx))
	mode := "tls"
	if cfg.ClientCA != "" {
		mode = "mtls"
	}
	log.Info("serving TLS", "mode", mode, "cert", cfg.Cert, "not_after", r.Certificate().Leaf.NotAfter, "reload_interval", cfg.ReloadInterval)
	return r, nil
}

// hangups turns SIGHUP into a value on the returned channel until ctx ends: the signal asks the
// broker to re-read its certificate files now rather than at the next poll.
func hangups(ctx context.Context) <-chan struct{} {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	out := make(chan struct{})
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				select {
				case out <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// withTLS serves the gRPC server and, when there is one, the HTTP listener over TLS from r;
// it returns the gRPC server options and the listener to serve HTTP on.
func withTLS(r *tlsreload.Reloader, hlis net.Listener) ([]grpc.ServerOption, net.Listener) {
	if r == nil {
		return nil, hlis
	}
	if hlis != nil {
		hlis = tls.NewListener(hlis, r.HTTPConfig())
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.ServerConfig()))}, hlis
}

// bootstrap makes the first admin token when auth is on and the database holds no token.
func bootstrap(ctx context.Context, a *auth.Authenticator, cfg config.Config, log *slog.Logger) error {
	file := cfg.BootstrapTokenFile
	if file == "" {
		file = cfg.DB + ".admin-token"
		if postgres.IsURL(cfg.DB) {
			file = "jobwire.admin-token" // in the working directory: a URL names no directory
		}
	}
	res, err := a.Bootstrap(ctx, auth.BootstrapOptions{Token: cfg.BootstrapToken, File: file})
	if err != nil {
		return &SetupError{Err: fmt.Errorf("bootstrap admin token: %w", err)}
	}
	switch {
	case res.Created && res.File != "":
		log.Warn("auth is on and there were no tokens: wrote an admin token readable by this user only; create your own tokens with it, then delete the file",
			"file", res.File, "token_id", res.TokenID)
		if top, ok := gitWorkTree(res.File); ok {
			log.Warn("the admin token file is inside a git work tree, where a commit could publish it; delete it once you have your own token, and keep *.admin-token in .gitignore",
				"file", res.File, "work_tree", top)
		}
	case res.Created:
		log.Info("auth is on and there were no tokens: JOBWIRE_BOOTSTRAP_TOKEN is now an admin token", "token_id", res.TokenID)
	case cfg.BootstrapToken != "":
		log.Info("JOBWIRE_BOOTSTRAP_TOKEN ignored: the database already holds tokens")
	}
	return nil
}

// gitWorkTree reports whether file lies inside a git work tree, and its top: the nearest
// directory above file holding a .git directory, or a .git file as a linked work tree or a
// submodule has.
func gitWorkTree(file string) (string, bool) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", false
	}
	for dir := filepath.Dir(abs); ; {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
