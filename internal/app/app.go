// Package app wires a configuration into a running broker: store, broker, gRPC server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/server"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	"google.golang.org/grpc"
)

// gcPercent is the broker's GOGC unless the environment sets one.
const gcPercent = 400

// ShutdownGrace is how long running jobs get to finish when the broker stops.
const ShutdownGrace = 30 * time.Second

// ListenError is returned by Run when the listening address cannot be bound (in use, not an
// address of this machine). Nothing was opened or written then.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("cannot listen on %s: %v", e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// listen binds cfg.Listen. It runs before the database is opened, so that an address that
// cannot be used fails the start without creating or migrating a database.
func listen(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		// "listen tcp 127.0.0.1:7070: bind: address already in use": the cause is the last part.
		cause := err
		var se *os.SyscallError
		if errors.As(err, &se) {
			cause = se.Err
		}
		return nil, &ListenError{Addr: addr, Err: cause}
	}
	return lis, nil
}

// Run serves cfg until ctx ends, then shuts down gracefully. ready, if set, is called with the
// listening address once the broker accepts connections.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(net.Addr)) error {
	lis, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	defer lis.Close()
	if os.Getenv("GOGC") == "" {
		// The broker's heap is small and short-lived (messages in flight); collecting it half
		// as often costs little memory and gives the single writer goroutine more CPU.
		debug.SetGCPercent(gcPercent)
	}
	policy, err := storeretry.New(storeretry.Config{Options: cfg.Storage, Classify: sqlite.Classify, Logger: log})
	if err != nil {
		return err
	}
	sync := sqlite.SyncNormal
	if cfg.FullSync {
		sync = sqlite.SyncFull
	}
	unlock, err := sqlite.LockFile(cfg.DB, lis.Addr().String())
	if err != nil {
		return err
	}
	defer unlock()
	st, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: sync, BusyTimeout: cfg.BusyTimeout, Retry: policy, Logger: log})
	if err != nil {
		return fmt.Errorf("open database %s: %w", cfg.DB, err)
	}
	defer st.Close()
	b, err := broker.New(broker.Options{Store: st, Config: cfg.Broker, Logger: log, Breakers: &cfg.Breakers})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	limits := server.DefaultLimits()
	limits.MaxPayload = cfg.MaxPayload
	gs, srv := server.New(b, server.Options{Logger: log, Limits: limits, Clock: clock.Real{}})
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	log.Info("jobwire broker listening", "addr", lis.Addr().String(), "db", cfg.DB, "durability", sync)
	if ready != nil {
		ready(lis.Addr())
	}
	select {
	case err := <-serveErr:
		_ = b.Shutdown(context.WithoutCancel(ctx))
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining workers", "grace", ShutdownGrace)
	srv.SetNotServing()
	graceCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	shutErr := b.Shutdown(graceCtx)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gs.Stop()
	}
	// ErrServerStopped: the stop came before Serve started, as when a broker is stopped right
	// after it became ready.
	if err := <-serveErr; err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, grpc.ErrServerStopped) {
		return errors.Join(shutErr, err)
	}
	log.Info("stopped")
	return shutErr
}
