package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/testcerts"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// language is one worker library under test and what its conformance worker reports.
type language struct {
	name string
	// command is the argv that starts the language's conformance worker.
	command func() []string
	// missing says why the language's runtime cannot run here, or "" when it can.
	missing func() string
	// Error types the broker records for the worker's failures.
	fatalType     string // the fatal job type
	flakyType     string // flaky's transient failures
	transientType string // always_transient
}

// shutdownErrorType is what every library reports for a handler cut off by the shutdown grace.
const shutdownErrorType = "WorkerShutdown"

// pythonBin is the Python that runs the Python workers: $JOBWIRE_PYTHON (make test's is the
// virtual environment of the PyPI packages sdks/python/constraints.txt pins), else that
// environment when `make sdk-deps` has built it, else Debian's python3 with its own packages.
var pythonBin = sync.OnceValue(func() string {
	if p := os.Getenv("JOBWIRE_PYTHON"); p != "" {
		return p
	}
	if p := filepath.Join(repoRoot, ".bin", "python", "bin", "python"); fileExists(p) {
		return p
	}
	return debianPython
})

// debianPython is Debian's python3, which sees the distribution's python3-grpcio and python3-protobuf.
const debianPython = "/usr/bin/python3"

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var languages = []*language{
	{
		name:          "go",
		command:       func() []string { return []string{goWorkerBin} },
		missing:       func() string { return "" },
		fatalType:     "*main.FatalByDesignError",
		flakyType:     "error",
		transientType: "error",
	},
	{
		name: "python",
		command: func() []string {
			return []string{pythonBin(), "-u", filepath.Join(repoRoot, "sdks/python/examples/conformance_worker.py")}
		},
		missing: sync.OnceValue(func() string {
			out, err := exec.Command(pythonBin(), "-c", "import grpc, google.protobuf").CombinedOutput()
			if err != nil {
				return fmt.Sprintf("%s cannot import grpc and protobuf (make sdk-deps, or apt-get install python3-grpcio python3-protobuf): %v %s",
					pythonBin(), err, strings.TrimSpace(string(out)))
			}
			return ""
		}),
		fatalType:     "ValueError",
		flakyType:     "ConnectionError",
		transientType: "RuntimeError",
	},
	{
		name: "node",
		command: func() []string {
			return []string{"node", filepath.Join(repoRoot, "sdks/node/examples/conformance_worker.js")}
		},
		missing: sync.OnceValue(func() string {
			if _, err := exec.LookPath("node"); err != nil {
				return "node is not on PATH"
			}
			if _, err := os.Stat(filepath.Join(repoRoot, "sdks/node/node_modules/@grpc/grpc-js")); err != nil {
				return "sdks/node/node_modules is missing (run make sdk-deps, or npm ci in sdks/node)"
			}
			return ""
		}),
		fatalType:     "TypeError",
		flakyType:     "Error",
		transientType: "Error",
	},
	{
		name:          "java",
		command:       func() []string { return javaWorker.command("io.jobwire.examples.ConformanceWorker") },
		missing:       javaMissing,
		fatalType:     "java.lang.IllegalArgumentException",
		flakyType:     "java.io.IOException",
		transientType: "java.lang.IllegalStateException",
	},
	{
		name:          "rust",
		command:       func() []string { return []string{rustWorkerBin()} },
		missing:       rustMissing,
		fatalType:     "panic",
		flakyType:     "std::io::error::Error",
		transientType: "error",
	},
}

// defaultLease is the brokers' lease duration unless a scenario sets its own: short, so that lost
// leases expire quickly, and long enough for heartbeats from a loaded machine.
const defaultLease = 3 * time.Second

// brokerConfig is the part of the broker's configuration file a scenario may change. The defaults
// keep every wait of the suite to a few seconds.
type brokerConfig struct {
	lease       time.Duration
	maxAttempts int
	// tls runs the broker with TLS and auth on (throwaway certificates, an admin token from
	// JOBWIRE_BOOTSTRAP_TOKEN); the suite's client uses both.
	tls tlsMode
	// maxBytes, when set, is the broker's max_payload_bytes and max_result_bytes.
	maxBytes int
}

func (c brokerConfig) yaml() string {
	if c.lease == 0 {
		c.lease = defaultLease
	}
	if c.maxAttempts == 0 {
		c.maxAttempts = 3
	}
	// Breakers are off: scenarios fail jobs on purpose, and an open breaker would hold back the
	// jobs of the scenario that follows.
	return fmt.Sprintf(`lease_duration: %s
retry:
  base_delay: 100ms
  jitter_max: 0s
  max_attempts: %d
breaker:
  disabled: true
log_level: debug
`, c.lease, c.maxAttempts) + c.limits()
}

// limits is the YAML of the broker's payload and result limits, when set.
func (c brokerConfig) limits() string {
	if c.maxBytes == 0 {
		return ""
	}
	return fmt.Sprintf("max_payload_bytes: %d\nmax_result_bytes: %d\n", c.maxBytes, c.maxBytes)
}

// env is one scenario's world: a state directory, one broker process, the worker processes the
// scenario starts and a client connected to the broker.
type env struct {
	t      *testing.T
	lang   *language
	dir    string // marker files of the conformance workers
	logDir string
	c      *client.Client
	broker *brokerProc
	cfg    brokerConfig
	// certs and adminToken are set when the broker serves TLS.
	certs      testcerts.Files
	adminToken string

	mu      sync.Mutex
	procs   []*proc
	logSeqs map[string]int
}

// The stores a scenario's broker runs on: a SQLite file of its own, or a PostgreSQL schema of its
// own on the server pgtest names.
const (
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
)

var stores = []string{storeSQLite, storePostgres}

// column names the results of lang's worker against a broker on store.
func column(lang *language, store string) string {
	if store == storePostgres {
		return lang.name + "-pg"
	}
	return lang.name
}

// newEnv starts a broker on store with cfg and connects a client to it. Everything is stopped
// when the test ends; the processes' logs are printed if it failed.
func newEnv(t *testing.T, lang *language, store string, cfg brokerConfig) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{t: t, lang: lang, cfg: cfg, dir: filepath.Join(root, "state"), logDir: filepath.Join(root, "logs"), logSeqs: map[string]int{}}
	for _, d := range []string{e.dir, e.logDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(root, "jobwire.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.yaml()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: kill what still runs, then show the logs, then the
	// temporary directory goes.
	t.Cleanup(e.dumpLogsIfFailed)
	t.Cleanup(e.killAll)
	db := filepath.Join(root, "jobwire.db")
	if store == storePostgres {
		db = pgtest.URL(t)
	}
	e.broker = &brokerProc{env: e, addr: freeAddr(t), db: db, cfg: cfgPath}
	// The client must find a restarted broker quickly, so its reconnect backoff is short.
	opts := []client.DialOption{client.WithDialOptions(grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 500 * time.Millisecond},
		MinConnectTimeout: time.Second,
	}))}
	if cfg.tls != tlsOff {
		e.certs = testcerts.Write(t, root)
		e.adminToken = "conformance-admin-token-0123456789abcdef"
		e.broker.args = []string{"--auth", "--tls-cert", e.certs.ServerCert, "--tls-key", e.certs.ServerKey}
		if cfg.tls == tlsMutual {
			e.broker.args = append(e.broker.args, "--tls-client-ca", e.certs.CA)
		}
		e.broker.environ = []string{"JOBWIRE_BOOTSTRAP_TOKEN=" + e.adminToken}
		opts = append(opts, client.WithTLSFiles(e.certs.CA, e.certs.ClientCert, e.certs.ClientKey), client.WithToken(e.adminToken))
	}
	e.broker.start()
	c, err := client.Dial(t.Context(), e.broker.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.c = c
	e.broker.waitReady()
	return e
}

// freeAddr returns a loopback address nothing listens on right now. The broker binds it a moment
// later; another process taking the port in between is unlikely enough for a test.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is one child process whose output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	// state is set once done is closed.
	state *os.ProcessState
}

// spawn starts argv with extra environment variables, logging to <logDir>/<name>-<n>.log.
func (e *env) spawn(name string, argv []string, extraEnv ...string) *proc {
	e.t.Helper()
	e.mu.Lock()
	e.logSeqs[name]++
	logPath := filepath.Join(e.logDir, fmt.Sprintf("%s-%d.log", name, e.logSeqs[name]))
	e.mu.Unlock()
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to timeout for the process to end and returns how long that took and its
// exit code (-1 when a signal ended it).
func (p *proc) waitExit(t *testing.T, timeout time.Duration) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	select {
	case <-p.done:
		return time.Since(start), p.state.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
		return 0, 0
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	<-p.done
}

func (e *env) killAll() {
	e.mu.Lock()
	procs := append([]*proc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// dumpLogsIfFailed prints the end of every process log of a failed test.
func (e *env) dumpLogsIfFailed() {
	if !e.t.Failed() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		state := "running"
		if p.exited() {
			state = p.state.String()
		}
		e.t.Logf("---- %s (%s, %s) ----\n%s", p.name, filepath.Base(p.log), state, tail(p.log, 60))
	}
}

// tail returns the last n lines of a file, leaving out the broker's log lines of successful calls:
// the suite's polling would drown everything else.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `msg="finished call"`) && strings.Contains(line, "grpc.code=OK") {
			continue
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if err := sc.Err(); err != nil {
		lines = append(lines, "(reading the log: "+err.Error()+")")
	}
	return strings.Join(lines, "\n")
}

// brokerProc is the broker of a scenario. It can be stopped and started again on the same address
// and database.
type brokerProc struct {
	env     *env
	addr    string
	db      string
	cfg     string
	args    []string // more flags of serve
	environ []string // more environment
	p       *proc
}

// start runs `jobwire serve`; call waitReady before relying on it.
func (b *brokerProc) start() {
	b.env.t.Helper()
	argv := append([]string{brokerBin, "serve", "--listen", b.addr, "--http-listen", "off", "--db", b.db, "--config", b.cfg}, b.args...)
	b.p = b.env.spawn("broker", argv, b.environ...)
}

// waitReady polls the broker's health service until it reports SERVING, failing if the process
// ends first.
func (b *brokerProc) waitReady() {
	t := b.env.t
	t.Helper()
	health := healthpb.NewHealthClient(b.env.c.Conn())
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if code := status.Code(err); code != codes.OK && code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Fatalf("broker health check: %v", err)
		}
		if b.p.exited() {
			t.Fatalf("broker exited with %v before it was ready:\n%s", b.p.state, tail(b.p.log, 30))
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker at %s not ready after %s: %v", b.addr, waitTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// restart starts the broker again after it stopped, on the same address and database.
func (b *brokerProc) restart() {
	b.env.t.Helper()
	start := time.Now()
	b.start()
	b.waitReady()
	b.env.t.Logf("broker restarted and ready in %s", time.Since(start).Round(time.Millisecond))
}

// startWorker starts the language's conformance worker with the given id and extra environment.
func (e *env) startWorker(id string, extraEnv ...string) *proc {
	e.t.Helper()
	vars := append([]string{
		"JOBWIRE_ADDR=" + e.broker.addr,
		"JOBWIRE_WORKER_ID=" + id,
		"JOBWIRE_CONFORMANCE_DIR=" + e.dir,
		"JOBWIRE_CAPACITY=4",
		"JOBWIRE_GRACE_SECONDS=10",
	}, extraEnv...)
	return e.spawn("worker-"+id, e.lang.command(), vars...)
}
