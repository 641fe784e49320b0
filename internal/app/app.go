// Package app wires a configuration into a running broker: store, broker, gRPC server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/internal/lograte"
	"github.com/jobwire/jobwire/internal/metrics"
	"github.com/jobwire/jobwire/internal/tracing"
	"github.com/jobwire/jobwire/internal/web"
	"github.com/jobwire/jobwire/server"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
)

// GCPercent is the broker's GOGC unless the environment sets one.
const GCPercent = 400

// ShutdownGrace is how long running jobs get to finish when the broker stops.
const ShutdownGrace = 30 * time.Second

// ListenError is returned by Run when the listening address cannot be bound (in use, not an
// address of this machine). Nothing was opened or written then.
type ListenError struct {
	Addr string
	Err  error
	// HTTP marks the HTTP listener's address (metrics, health, dashboard), not gRPC's.
	HTTP bool
}

func (e *ListenError) Error() string {
	if e.HTTP {
		return fmt.Sprintf("cannot listen on %s for HTTP: %v", e.Addr, e.Err)
	}
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

// Addrs are the addresses the broker listens on.
type Addrs struct {
	GRPC net.Addr
	// HTTP is nil when the HTTP listener is off.
	HTTP net.Addr
}

// Run serves cfg until ctx ends, then shuts down gracefully. ready, if set, is called with the
// listening addresses once the broker accepts connections.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(Addrs)) error {
	// Every part of the broker logs through this: a warning or error that repeats in a loop
	// (a misbehaving worker stream, a failing checkpoint) is written once per window.
	log = slog.New(lograte.New(log.Handler(), lograte.DefaultWindow, clock.Real{}))
	setMemoryLimit()
	lis, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	defer lis.Close()
	var hlis net.Listener
	if cfg.HTTPListen != config.HTTPOff {
		if hlis, err = listen(cfg.HTTPListen); err != nil {
			err.(*ListenError).HTTP = true
			return err
		}
		defer hlis.Close()
	}
	tlsCtx, stopTLS := context.WithCancel(ctx)
	defer stopTLS()
	certs, err := loadTLS(tlsCtx, cfg.TLS, log)
	if err != nil {
		return err
	}
	tlsOpts, hlis := withTLS(certs, hlis)
	if os.Getenv("GOGC") == "" {
		// The broker's heap is small and short-lived (messages in flight); collecting it half
		// as often costs little memory and gives the single writer goroutine more CPU.
		debug.SetGCPercent(GCPercent)
	}
	st, policy, err := openStore(ctx, cfg, lis.Addr().String(), log)
	if err != nil {
		return err
	}
	defer st.Close()
	var (
		obs     broker.Observer
		m       *metrics.Metrics
		srvOpts []grpc.ServerOption
		reqInts []grpc.UnaryServerInterceptor // what a stream's requests pass as calls
		grpcm   *metrics.GRPC
	)
	if cfg.Metrics {
		m = metrics.New(metrics.Options{Version: Version()})
		obs = m
		grpcm = metrics.NewGRPC()
		m.Registry().MustRegister(grpcm)
		srvOpts = append(srvOpts, grpc.ChainUnaryInterceptor(grpcm.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(grpcm.StreamServerInterceptor()))
		reqInts = append(reqInts, grpcm.UnaryServerInterceptor())
	}
	tp, stopTracing, err := tracing.FromEnv(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	var tracer trace.Tracer
	if tp != nil {
		tracer = tp.Tracer("github.com/jobwire/jobwire/broker")
		log.Info("exporting traces over OTLP")
	}
	// A PostgreSQL database may have other brokers: this one joins them.
	cluster, _ := st.(store.Cluster)
	// A broker of a cluster stops taking calls while its database is silent, so that its
	// callers go to the others; one alone has nowhere to send them, and holds them.
	var silence time.Duration
	if cluster != nil {
		silence = broker.DefaultDatabaseSilence
	}
	b, err := broker.New(broker.Options{Store: st, Config: cfg.Broker, Logger: log, Breakers: &cfg.Breakers,
		Observer: obs, Tracer: tracer, Cluster: cluster, Addr: lis.Addr().String(), DatabaseSilence: silence})
	if err != nil {
		return err
	}
	authn := auth.New(auth.Options{Store: st, Logger: log, Audit: b.AuditToken, Cache: auth.CacheOptions{TTL: cfg.TokenCacheTTL}})
	// Revocations through other brokers of the cluster end this broker's trust in a token.
	b.WatchCluster(authn.ClusterEvent)
	if cfg.Auth {
		// The audit trail names the broker's start as the maker of a bootstrap token.
		startup := broker.WithActor(ctx, broker.Actor{Name: "bootstrap", Source: "startup"})
		if err := bootstrap(startup, authn, cfg, log); err != nil {
			return err
		}
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	limits := server.DefaultLimits()
	limits.MaxPayload = cfg.MaxPayload
	limits.MaxWorkerStreamsPerToken = cfg.MaxWorkerStreamsPerToken
	transport := server.DefaultTransport()
	// A payload travels in one enqueue and a result in one worker message: the largest the
	// broker takes of each must fit in one, with the fields around it. The broker sends its
	// workers as much (server.MaxWorkerMessageBytes).
	transport.MaxRecvMsgSize = max(transport.MaxRecvMsgSize, cfg.Broker.MaxResultBytes+64<<10, cfg.MaxPayload+64<<10)
	gs, srv := server.New(b, server.Options{Logger: log, Limits: limits, Clock: clock.Real{},
		Auth: authn, RequireAuth: cfg.Auth, ServerOptions: append(srvOpts, tlsOpts...),
		RequestInterceptors: reqInts, Transport: transport})
	addrs := Addrs{GRPC: lis.Addr()}
	var hs *http.Server
	if hlis != nil {
		listenHost, _, _ := net.SplitHostPort(cfg.HTTPListen)
		wopts := web.Options{Ready: b.Ready, MetricsAuth: cfg.MetricsAuth, Log: log,
			Conn: srv.LocalConn(), Context: ctx, ListenHost: listenHost, AllowedHosts: cfg.HTTPAllowedHosts}
		if cfg.Auth {
			// The dashboard's reads need a viewer token and its actions an admin token, as
			// the same calls over gRPC do.
			wopts.Auth = web.FromTokens(authn)
		}
		if m != nil {
			m.Watch(b, policy, clock.Real{}, log)
			if pool, ok := st.(metrics.Pool); ok {
				m.WatchPool(pool)
			}
			grpcm.InitializeMetrics(gs)
			wopts.Metrics = m.Handler()
		}
		hs = &http.Server{Handler: web.Handler(wopts), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		addrs.HTTP = hlis.Addr()
		go func() {
			if err := hs.Serve(hlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http listener stopped", "err", err)
			}
		}()
		log.Info("jobwire http listening", "addr", hlis.Addr().String(), "metrics", cfg.Metrics)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(transport.Listener(lis)) }()
	log.Info("jobwire broker listening", "addr", lis.Addr().String(), "db", DBName(cfg.DB), "store", storeKind(cfg.DB),
		"tls", cfg.TLS.Enabled(), "auth", cfg.Auth)
	if ready != nil {
		ready(addrs)
	}
	select {
	case err := <-serveErr:
		closeHTTP(hs)
		_ = b.Shutdown(context.WithoutCancel(ctx))
		return err
	case <-ctx.Done():
	}
	defer closeHTTP(hs)
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

// openStore opens the store cfg.DB names: a postgres:// URL is a PostgreSQL database, which
// several brokers may serve at once, anything else a SQLite file, claimed for this broker alone
// by a lock file beside it, so a second broker on it refuses to start.
func openStore(ctx context.Context, cfg config.Config, addr string, log *slog.Logger) (store.Store, *storeretry.Policy, error) {
	if postgres.IsURL(cfg.DB) {
		policy, err := storeretry.New(storeretry.Config{Options: cfg.Storage, Classify: postgres.Classify, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		st, err := postgres.Open(ctx, cfg.DB, postgres.Options{Retry: policy, Logger: log, Addr: addr,
			LeaderTimeout: cfg.LeaderTimeout})
		if err != nil {
			// Its errors start "open postgres://...", naming the database without a password.
			return nil, nil, err
		}
		log.Info("postgres store", "db", postgres.Redact(cfg.DB), "broker", st.BrokerID())
		return st, policy, nil
	}
	policy, err := storeretry.New(storeretry.Config{Options: cfg.Storage, Classify: sqlite.Classify, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	sync := sqlite.SyncNormal
	if cfg.FullSync {
		sync = sqlite.SyncFull
	}
	unlock, err := sqlite.LockFile(cfg.DB, addr)
	if err != nil {
		return nil, nil, err
	}
	st, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: sync, BusyTimeout: cfg.BusyTimeout, Retry: policy, Logger: log})
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("open database %s: %w", cfg.DB, err)
	}
	log.Info("sqlite store", "db", cfg.DB, "durability", sync)
	return unlockingStore{Store: st, unlock: unlock}, policy, nil
}

// Migrate applies the migrations the store db names lacks, as a broker's start would, without
// serving: a PostgreSQL database is not joined as a broker, and a SQLite file is locked
// meanwhile (it fails while a broker serves the file). It returns the names of the migrations
// it applied.
func Migrate(ctx context.Context, db string, log *slog.Logger) ([]string, error) {
	if postgres.IsURL(db) {
		return postgres.Migrate(ctx, db, log)
	}
	return sqlite.Migrate(ctx, db, log)
}

// unlockingStore gives the SQLite file's lock up once the store is closed.
type unlockingStore struct {
	*sqlite.Store
	unlock func()
}

func (s unlockingStore) Close() error {
	defer s.unlock()
	return s.Store.Close()
}

// DBName is the database as logs and the command line show it: a URL without its password.
func DBName(db string) string {
	if postgres.IsURL(db) {
		return postgres.Redact(db)
	}
	return db
}

func storeKind(db string) string {
	if postgres.IsURL(db) {
		return "postgres"
	}
	return "sqlite"
}

// closeHTTP stops the HTTP listener, if there is one, after the broker has drained: /readyz
// says "not ready" while it drains.
func closeHTTP(hs *http.Server) {
	if hs != nil {
		_ = hs.Close()
	}
}

// Version is the running build's version: the module version from the build info, or "(devel)".
func Version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// DefaultMemoryLimit is the heap size the Go runtime is asked to stay under unless GOMEMLIMIT
// says otherwise: under a flood of large messages the garbage they leave is collected sooner,
// so the broker's memory stays near what it really holds. It is a soft limit: a broker that
// needs more gets more, at the cost of more frequent collections.
const DefaultMemoryLimit = 384 << 20

func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DefaultMemoryLimit)
	}
}
