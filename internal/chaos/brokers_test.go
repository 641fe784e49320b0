package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// brokerBin is the jobwire command every test of the package runs: built once, on first use,
// into a directory TestMain removes, instead of once per test (a link of the whole broker each).
var brokerBin struct {
	once     sync.Once
	dir, bin string
	err      error
}

// TestMain removes the jobwire command the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if brokerBin.dir != "" {
		_ = os.RemoveAll(brokerBin.dir)
	}
	os.Exit(code)
}

// buildBroker builds the jobwire command from this tree, with the race detector if race is set,
// the first time it is called in the package's run, and returns its path.
func buildBroker(t *testing.T, race bool) string {
	t.Helper()
	brokerBin.once.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if brokerBin.dir, brokerBin.err = os.MkdirTemp("", "jobwire-chaos-"); brokerBin.err != nil {
			return
		}
		brokerBin.bin = filepath.Join(brokerBin.dir, "jobwire")
		args := []string{"build", "-o", brokerBin.bin}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.Command(goCmd, append(args, "github.com/jobwire/jobwire/cmd/jobwire")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			brokerBin.err = fmt.Errorf("go build ./cmd/jobwire: %v\n%s", err, out)
		}
	})
	if brokerBin.err != nil {
		t.Fatal(brokerBin.err)
	}
	return brokerBin.bin
}

// brokerSet runs n `jobwire serve` processes on one database, each on a loopback port of its
// own that it keeps across restarts, so clients can list the addresses once.
type brokerSet struct {
	bin, db, config, dir string
	addrs                []string
	// dbs, where set, is the database URL broker i uses instead of db: the same database,
	// reached another way (through a proxy).
	dbs map[int]string

	mu     sync.Mutex
	procs  []*brokerProc // nil while that broker is down
	starts []int
	kills  int
}

// brokerProc is one running broker process.
type brokerProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its log is copied
	// ready is set once it listens; guarded by the set's mu.
	ready bool
}

// newBrokerSet prepares n brokers on db, with the jobwire command ($JOBWIRE_CHAOS_BIN, or the one
// buildBroker built), brokerConfig, and their logs in dir.
func newBrokerSet(t *testing.T, n int, db, dir string) *brokerSet {
	t.Helper()
	bin := os.Getenv(envBin)
	if bin == "" {
		bin = buildBroker(t, os.Getenv(envRace) == "1")
	}
	config := filepath.Join(dir, "jobwire.yaml")
	if err := os.WriteFile(config, []byte(brokerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &brokerSet{bin: bin, db: db, config: config, dir: dir, procs: make([]*brokerProc, n), starts: make([]int, n)}
	for range n {
		s.addrs = append(s.addrs, freeAddr(t))
	}
	t.Cleanup(func() {
		for i := range n {
			s.kill(i)
		}
		if t.Failed() {
			for i := range n {
				t.Logf("broker %d log (%s), last lines:\n%s", i, s.logPath(i), tail(s.logPath(i), 40))
			}
		}
	})
	return s
}

// freeAddr is a loopback address nothing listens on now. The port is reused for every start of
// one broker; a restart that finds it taken fails the test with the broker's own message.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *brokerSet) logPath(i int) string {
	return filepath.Join(s.dir, fmt.Sprintf("broker-%d.log", i))
}

// start starts broker i and waits until it listens. Its log is appended to broker-i.log.
func (s *brokerSet) start(i int) error {
	s.mu.Lock()
	if s.procs[i] != nil {
		s.mu.Unlock()
		return fmt.Errorf("broker %d is running already", i)
	}
	s.starts[i]++
	n := s.starts[i]
	s.mu.Unlock()

	logFile, err := os.OpenFile(s.logPath(i), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "=== start %d of broker %d on %s\n", n, i, s.addrs[i])
	db := s.db
	if d, ok := s.dbs[i]; ok {
		db = d
	}
	cmd := exec.Command(s.bin, "serve", "--listen", s.addrs[i], "--http-listen", "off", "--db", db,
		"--config", s.config, "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logFile.Close()
		return err
	}
	cmd.Stdout = logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start broker %d: %w", i, err)
	}
	p := &brokerProc{cmd: cmd, done: make(chan struct{})}
	listening := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		said := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if !said && strings.Contains(line, "jobwire broker listening") {
				said = true
				close(listening)
			}
		}
		_, _ = io.Copy(logFile, stderr)
		err := cmd.Wait()
		fmt.Fprintf(logFile, "=== broker %d exited: %v\n", i, err)
		_ = logFile.Close()
	}()
	s.mu.Lock()
	s.procs[i] = p
	s.mu.Unlock()
	select {
	case <-listening:
		s.mu.Lock()
		p.ready = true
		s.mu.Unlock()
		return nil
	case <-p.done:
		s.mu.Lock()
		s.procs[i] = nil
		s.mu.Unlock()
		return fmt.Errorf("broker %d exited before listening:\n%s", i, tail(s.logPath(i), 20))
	case <-time.After(30 * time.Second):
		s.kill(i)
		return fmt.Errorf("broker %d did not listen within 30s:\n%s", i, tail(s.logPath(i), 20))
	}
}

// startAll starts every broker of the set, failing the test if one does not listen.
func (s *brokerSet) startAll(t *testing.T) {
	t.Helper()
	for i := range s.addrs {
		if err := s.start(i); err != nil {
			t.Fatal(err)
		}
	}
}

// kill ends broker i with SIGKILL, if it runs, and waits until it is gone.
func (s *brokerSet) kill(i int) bool {
	s.mu.Lock()
	p := s.procs[i]
	s.procs[i] = nil
	s.mu.Unlock()
	if p == nil {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	s.mu.Lock()
	s.kills++
	s.mu.Unlock()
	return true
}

// signal sends sig to broker i if it runs.
func (s *brokerSet) signal(i int, sig syscall.Signal) bool {
	s.mu.Lock()
	p := s.procs[i]
	s.mu.Unlock()
	return p != nil && p.cmd.Process.Signal(sig) == nil
}

// live lists the brokers that run and listen now.
func (s *brokerSet) live() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i, p := range s.procs {
		if p != nil && p.ready {
			out = append(out, i)
		}
	}
	return out
}

// down lists the brokers that do not run now.
func (s *brokerSet) down() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i, p := range s.procs {
		if p == nil {
			out = append(out, i)
		}
	}
	return out
}

// problems returns the lines of the brokers' logs that show a bug whatever the test checks: a
// panic, a data race (with JOBWIRE_CHAOS_RACE=1) or an error-level message.
func (s *brokerSet) problems() []string {
	var out []string
	for i := range s.addrs {
		b, err := os.ReadFile(s.logPath(i))
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "panic:") || strings.Contains(line, "WARNING: DATA RACE") || strings.Contains(line, "level=ERROR") {
				out = append(out, fmt.Sprintf("broker %d: %s", i, line))
			}
		}
	}
	return out
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
