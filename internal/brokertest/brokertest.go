// Package brokertest starts a real broker for tests: a SQLite file in a temporary folder (or a
// fresh schema of the PostgreSQL test server), the gRPC server on a loopback port, a fake clock
// and a seeded random source.
//
// With JOBWIRE_TEST_STORE=postgres every broker whose test does not inject SQLite's own faults
// runs on PostgreSQL instead, so the broker's tests can be run against that store on demand:
// JOBWIRE_TEST_STORE=postgres scripts/with-postgres.sh go test ./broker/ ./server/
//
// With JOBWIRE_TEST_COMMIT=one-by-one every broker whose test does not choose its writer runs
// on the reference writer, one operation per transaction (broker.OneByOne), so that the
// broker's behaviour tests check group commit against it:
// JOBWIRE_TEST_COMMIT=one-by-one go test ./broker/ ./server/
package brokertest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/server"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
	"github.com/jobwire/jobwire/store/storeretry"
)

// Start is the fake clock's starting time in every test.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Seed seeds the retry jitter; tests that check waits draw from a source with the same seed.
const Seed = 42

// NewRand returns the random source a broker started by this package uses.
func NewRand() *rand.Rand { return rand.New(rand.NewPCG(Seed, Seed)) }

// Options adjust the broker a test gets.
type Options struct {
	Config   broker.Config
	Breakers *broker.BreakerOptions
	Limits   server.Limits
	// Retry runs every storage operation. Nil means a storeretry policy over sqlite.Classify
	// with the Storage options, logging to the broker's log, as the real binary has.
	Retry sqlite.Retrier
	// Storage configures that default policy. Nil means storeretry.DefaultOptions without a
	// wait between retries. A non-zero delay waits on the fake clock, never the wall clock,
	// so a test that sets one advances the clock to let the retry run.
	Storage *storeretry.Options
	// BusyTimeout is how long SQLite waits for a lock before SQLITE_BUSY (0: the store's default).
	BusyTimeout time.Duration
	// RequireAuth turns auth on: every call needs a token (see Bundle.Token and DialToken).
	// Conn, Producer, Admin and Workers then carry an admin token.
	RequireAuth bool
	// Observer hears the broker's events (metrics); nil: none.
	Observer broker.Observer
	// Tracer records the broker's spans; nil: none.
	Tracer trace.Tracer
	// ServerOptions are added to the gRPC server's (transport credentials, metrics or tracing
	// interceptors, for example).
	ServerOptions []grpc.ServerOption
	// RequestInterceptors are server.Options.RequestInterceptors.
	RequestInterceptors []grpc.UnaryServerInterceptor
	// Faults, when set, injects storage faults: it runs every storage operation (in place of
	// Retry) and the broker's writes go through it.
	Faults *Faults
	// Quiet discards the broker's log (a fuzz target may not log through its testing.F).
	Quiet bool
	// Logger, when set, is the broker's log (instead of the test's, at warnings).
	Logger *slog.Logger
	// Transport bounds connections and streams (zero: server.DefaultTransport).
	Transport server.Transport
	// WrapStore, when set, wraps the store the broker writes through (to make one kind of
	// statement fail, say).
	WrapStore func(store.Store) store.Store
	// Postgres runs the broker on a fresh schema of the PostgreSQL test server
	// (JOBWIRE_TEST_POSTGRES; the test is skipped without one) instead of a SQLite file.
	Postgres bool
	// Cluster makes the broker one of a cluster of brokers on its PostgreSQL database (it
	// implies Postgres): the store is its broker.Options.Cluster, elections run every
	// ElectionInterval, and its dispatch poll runs every ClusterPoll of the fake clock.
	Cluster bool
	// Join starts the broker on Join's database and fake clock, as another broker of its
	// cluster (it implies Cluster).
	Join *Bundle
	// ClusterPoll is broker.Options.ClusterPoll (zero: its default).
	ClusterPoll time.Duration
	// ElectionInterval is postgres.Options.ElectionInterval (zero: 50ms, so tests fail over fast).
	ElectionInterval time.Duration
	// DatabaseSilence is broker.Options.DatabaseSilence, on the fake clock. Zero: the broker
	// waits as long as its callers do, so that a test moving the clock while a write is in
	// flight does not make it refuse calls.
	DatabaseSilence time.Duration
	// AuthFailures bounds the failed authentications of one client (zero: auth's defaults).
	AuthFailures auth.FailureOptions
	// Commit chooses the broker's writer; nil: Commit().
	Commit *broker.Commit
}

// EnvStore is the variable that moves brokers to PostgreSQL (see the package doc).
const EnvStore = "JOBWIRE_TEST_STORE"

// EnvCommit is the variable that moves brokers to the reference writer (see the package doc).
const EnvCommit = "JOBWIRE_TEST_COMMIT"

// Commits are the broker's writers, for a test that runs against each.
var Commits = []broker.Commit{broker.GroupCommit, broker.OneByOne}

// GroupCommit is Options.Commit for a test that needs the throughput of group commit whatever
// EnvCommit says (thousands of jobs within WaitTimeout on a loaded machine).
func GroupCommit() *broker.Commit {
	c := broker.GroupCommit
	return &c
}

// Commit is the writer a broker runs on when its test does not choose: group commit, or the
// reference writer when EnvCommit says "one-by-one".
func Commit() broker.Commit {
	if os.Getenv(EnvCommit) == broker.OneByOne.String() {
		return broker.OneByOne
	}
	return broker.GroupCommit
}

// onPostgres reports whether a broker started with opts runs on PostgreSQL: asked for, or
// moved there by EnvStore when the test injects no SQLite-specific faults.
func (opts Options) onPostgres() bool {
	if opts.Postgres || opts.Cluster || opts.Join != nil {
		return true
	}
	return os.Getenv(EnvStore) == "postgres" && opts.Faults == nil && opts.Retry == nil && opts.BusyTimeout == 0
}

// Store is what a test reads the broker's store through: either store, with its retry counts.
type Store interface {
	store.Store
	StorageRetries() map[string]int64
}

// StorageOptions returns the storage retry options a broker started with opts uses.
func (opts Options) StorageOptions() storeretry.Options {
	if opts.Storage != nil {
		return *opts.Storage
	}
	o := storeretry.DefaultOptions()
	o.TransientRetryBaseDelay = 0
	return o
}

// Bundle is a running broker and clients for it.
type Bundle struct {
	t     testing.TB
	opts  Options
	Clock *clock.Fake
	// DBPath is the SQLite file, or the PostgreSQL URL when the broker runs there.
	DBPath string
	Addr   string

	Store  Store
	Broker *broker.Broker
	// Auth keeps the broker's API tokens.
	Auth *auth.Authenticator
	// AdminToken is an admin token when RequireAuth is set.
	AdminToken string
	grpc       *grpc.Server
	Server     *server.Server
	Conn       *grpc.ClientConn
	Producer   jobwirev1.ProducerServiceClient
	Admin      jobwirev1.AdminServiceClient
	Workers    jobwirev1.WorkerServiceClient
}

// DefaultConfig is broker.DefaultConfig: tests move the fake clock instead of shortening times.
func DefaultConfig() broker.Config { return broker.DefaultConfig() }

// New starts a broker with opts (a zero Config means DefaultConfig) and stops it at cleanup.
func New(t testing.TB, opts Options) *Bundle {
	t.Helper()
	if opts.Config.LeaseDuration == 0 {
		opts.Config = DefaultConfig()
	}
	b := &Bundle{t: t, opts: opts, Clock: clock.NewFake(Start), Addr: "127.0.0.1:0"}
	switch {
	case opts.Join != nil:
		b.DBPath, b.Clock = opts.Join.DBPath, opts.Join.Clock
		b.opts.Cluster = true
	case opts.onPostgres():
		b.DBPath = pgtest.URL(t)
	default:
		b.DBPath = filepath.Join(t.TempDir(), "jobwire.db")
	}
	b.start()
	t.Cleanup(b.Stop)
	return b
}

func (b *Bundle) start() {
	t := b.t
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if b.opts.Quiet {
		log = slog.New(slog.DiscardHandler)
	}
	if b.opts.Logger != nil {
		log = b.opts.Logger
	}
	retry := b.opts.Retry
	if b.opts.Faults != nil {
		retry = b.opts.Faults
	}
	classify := sqlite.Classify
	if postgres.IsURL(b.DBPath) {
		classify = postgres.Classify
	}
	if retry == nil {
		p, err := storeretry.New(storeretry.Config{Options: b.opts.StorageOptions(), Classify: classify,
			Logger: log, Sleep: storeretry.ClockSleep(b.Clock), Rand: NewRand()})
		if err != nil {
			t.Fatalf("storage retry policy: %v", err)
		}
		retry = p
	}
	var st Store
	var err error
	var cluster store.Cluster
	if postgres.IsURL(b.DBPath) {
		election := b.opts.ElectionInterval
		if election == 0 {
			election = 50 * time.Millisecond
		}
		var pst *postgres.Store
		pst, err = postgres.Open(ctx, b.DBPath, postgres.Options{Retry: retry, Logger: log, ElectionInterval: election})
		st = pst
		if err == nil && b.opts.Cluster {
			cluster = pst
		}
	} else {
		if err = sqlitetest.Prepare(b.DBPath); err != nil {
			t.Fatal(err)
		}
		st, err = sqlite.Open(ctx, b.DBPath, sqlite.Options{BusyTimeout: b.opts.BusyTimeout, Retry: retry, Logger: log})
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	var bst store.Store = st
	if b.opts.Faults != nil {
		bst = faultStore{Store: st, f: b.opts.Faults}
	}
	if b.opts.WrapStore != nil {
		bst = b.opts.WrapStore(bst)
	}
	commit := Commit()
	if b.opts.Commit != nil {
		commit = *b.opts.Commit
	}
	br, err := broker.New(broker.Options{Store: bst, Commit: commit, Config: b.opts.Config, Clock: b.Clock, Rand: NewRand(),
		Logger: log, Breakers: b.opts.Breakers, Observer: b.opts.Observer, Tracer: b.opts.Tracer,
		Cluster: cluster, ClusterPoll: b.opts.ClusterPoll, DatabaseSilence: b.opts.DatabaseSilence})
	if err != nil {
		t.Fatalf("new broker: %v", err)
	}
	if err := br.Start(ctx); err != nil {
		t.Fatalf("start broker: %v", err)
	}
	lis, err := net.Listen("tcp", b.Addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	b.Addr = lis.Addr().String()
	b.Auth = auth.New(auth.Options{Store: st, Clock: b.Clock, Logger: log, Audit: br.AuditToken, Failures: b.opts.AuthFailures})
	br.WatchCluster(b.Auth.ClusterEvent)
	gs, srv := server.New(br, server.Options{Logger: log, Limits: b.opts.Limits, Clock: b.Clock,
		Auth: b.Auth, RequireAuth: b.opts.RequireAuth, ServerOptions: b.opts.ServerOptions,
		RequestInterceptors: b.opts.RequestInterceptors, Transport: b.opts.Transport})
	tr := b.opts.Transport
	if tr == (server.Transport{}) {
		tr = server.DefaultTransport()
	}
	go func() { _ = gs.Serve(tr.Listener(lis)) }()
	b.Store, b.Broker, b.grpc, b.Server = st, br, gs, srv
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if b.opts.RequireAuth {
		if b.AdminToken == "" {
			b.AdminToken = b.Token(auth.RoleAdmin, auth.Scope{})
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(client.TokenCredentials(b.AdminToken)))
	}
	conn, err := grpc.NewClient(b.Addr, dialOpts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	b.Conn = conn
	b.Producer = jobwirev1.NewProducerServiceClient(conn)
	b.Admin = jobwirev1.NewAdminServiceClient(conn)
	b.Workers = jobwirev1.NewWorkerServiceClient(conn)
}

// Token creates an API token with role and scope and returns it.
func (b *Bundle) Token(role auth.Role, scope auth.Scope) string {
	b.t.Helper()
	token, _, err := b.Auth.Create(context.Background(), auth.CreateParams{Name: "test " + role.String(), Role: role, Scope: scope})
	if err != nil {
		b.t.Fatalf("create %s token: %v", role, err)
	}
	return token
}

// DialToken opens a plaintext connection that presents token on every call ("" presents
// none); it is closed at cleanup.
func (b *Bundle) DialToken(token string) *grpc.ClientConn {
	b.t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.TokenCredentials(token)))
	}
	conn, err := grpc.NewClient(b.Addr, opts...)
	if err != nil {
		b.t.Fatalf("dial: %v", err)
	}
	b.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Stop shuts the broker down (giving workers no grace) and closes the store.
func (b *Bundle) Stop() {
	if b.Broker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = b.Broker.Shutdown(ctx)
	b.grpc.Stop()
	_ = b.Conn.Close()
	_ = b.Store.Close()
	b.Broker = nil
}

// StopGracefully shuts the broker down as `jobwire serve` does at a signal: not serving,
// workers drained, then a graceful stop of the gRPC server, which waits for every open call
// and stream to end (no hard stop after it), and the store closed.
func (b *Bundle) StopGracefully() {
	br := b.Broker
	if br == nil {
		return
	}
	b.Broker = nil // what follows may hang in a failing test: its cleanup's Stop leaves it be
	b.Server.SetNotServing()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = br.Shutdown(ctx)
	b.grpc.GracefulStop()
	_ = b.Conn.Close()
	_ = b.Store.Close()
}

// Restart stops the broker and starts a new one on the same database, address and clock.
func (b *Bundle) Restart() {
	b.t.Helper()
	b.Stop()
	b.start()
}

// Advance moves the fake clock and runs a sweep, so expired leases and timeouts are handled
// before it returns.
func (b *Bundle) Advance(d time.Duration) {
	b.Clock.Advance(d)
	b.Broker.Sweep()
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// Enqueue stores one job through the producer service and returns its id; an error fails the
// test.
func (b *Bundle) Enqueue(spec *jobwirev1.JobSpec) int64 {
	b.t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		b.t.Fatalf("enqueue %s: %v", spec.GetType(), err)
	}
	return res.GetJob().GetId()
}

// WaitState polls job id through the producer API until it is in state want, and returns it:
// the broker applies some changes on its own goroutines (a start that rides a later commit,
// promotion after a clock move).
func (b *Bundle) WaitState(id int64, want jobwirev1.JobState) *jobwirev1.Job {
	b.t.Helper()
	var j *jobwirev1.Job
	WaitFor(b.t, fmt.Sprintf("job %d to be %s", id, want), func() bool {
		res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
		if err != nil {
			b.t.Fatalf("get job %d: %v", id, err)
		}
		j = res.GetJob()
		return j.GetState() == want
	})
	return j
}

// WaitListening waits until n brokers listen for the events of the bundle's cluster: a job
// enqueued after it returns wakes each of them.
func (b *Bundle) WaitListening(n int) {
	b.t.Helper()
	st, ok := b.Store.(*postgres.Store)
	if !ok {
		b.t.Fatal("WaitListening: the broker is not on PostgreSQL")
	}
	WaitFor(b.t, fmt.Sprintf("%d brokers to listen for cluster events", n), func() bool {
		got, err := st.Listeners(context.Background())
		return err == nil && got == n
	})
}

// WaitLeader waits until the broker leads its cluster.
func (b *Bundle) WaitLeader() {
	b.t.Helper()
	WaitFor(b.t, "the broker to lead", b.Broker.Leader)
}

// WaitStreams waits until the broker serves n worker streams: after a RawWorker's Kill, until
// the broker has seen its stream end.
func (b *Bundle) WaitStreams(n int) {
	b.t.Helper()
	WaitFor(b.t, fmt.Sprintf("the broker to serve %d worker streams", n), func() bool {
		streams, _ := b.Broker.WorkerTotals()
		return streams == n
	})
}
