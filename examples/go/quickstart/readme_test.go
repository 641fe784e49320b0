//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/mdblock"
)

// quickStartMarker starts the comment line that precedes the README's quick-start block.
const quickStartMarker = "<!-- quickstart:"

// stepTimeout bounds each step of the quick start, compiling with go run included.
const stepTimeout = 3 * time.Minute

// step is one line of the quick start.
type step struct {
	command string
	comment string
	// untilCtrlC: the command runs until interrupted (a broker, a worker), so the reader moves
	// on to another terminal while it runs.
	untilCtrlC bool
}

// TestREADMEQuickStart runs the README's quick start line by line, as a reader would, and
// checks that it ends with the enqueued job SUCCEEDED. The commands come from README.md itself,
// so the README cannot drift from what works. The broker gets its own database and free ports
// through JOBWIRE_DB, JOBWIRE_LISTEN, JOBWIRE_HTTP_LISTEN and JOBWIRE_ADDR, which every command
// honours.
func TestREADMEQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker, the CLI and the worker")
	}
	for _, tool := range []string{"bash", "make", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	steps := quickStartSteps(t, filepath.Join(root, "README.md"))
	last := steps[len(steps)-1]
	if last.untilCtrlC || !strings.Contains(last.command, "job get") {
		t.Fatalf("the quick start should end with a `job get` that shows the job, not %q", last.command)
	}

	addr := freeAddr(t)
	env := append(readerEnv(),
		"JOBWIRE_LISTEN="+addr, "JOBWIRE_ADDR="+addr, "JOBWIRE_DB="+filepath.Join(t.TempDir(), "jobwire.db"),
		"JOBWIRE_HTTP_LISTEN=127.0.0.1:0")
	var background []*shell
	t.Cleanup(func() {
		for i := len(background) - 1; i >= 0; i-- { // the worker before the broker
			background[i].interrupt(t)
		}
		if t.Failed() {
			for _, sh := range background {
				t.Logf("---- output of %q ----\n%s", sh.command, sh.output())
			}
		}
	})
	for i, st := range steps {
		t.Logf("step %d: %s", i+1, st.command)
		if st.untilCtrlC {
			sh := startShell(t, root, env, st.command)
			background = append(background, sh)
			waitListening(t, addr, sh)
			continue
		}
		if i < len(steps)-1 {
			runShell(t, root, env, st.command)
			continue
		}
		// The worker runs the job a moment after it starts; a reader who looks too early sees
		// it LEASED or RUNNING and looks again.
		deadline := time.Now().Add(stepTimeout)
		for {
			out := runShell(t, root, env, st.command)
			if strings.Contains(out, "SUCCEEDED") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s, %q still shows no SUCCEEDED job:\n%s", stepTimeout, st.command, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// readerEnv is the test's environment less what a make running this test passes down, so that
// `make run` behaves as in a reader's terminal.
func readerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// quickStartSteps reads the fenced block after the quick-start marker in the README.
func quickStartSteps(t *testing.T, readme string) []step {
	t.Helper()
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	block, err := mdblock.After(doc, quickStartMarker)
	if err != nil {
		t.Fatalf("%s: %v", readme, err)
	}
	var steps []step
	for line := range strings.Lines(block.Body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, comment := splitComment(line)
		steps = append(steps, step{command: cmd, comment: comment, untilCtrlC: strings.Contains(comment, "until Ctrl-C")})
	}
	if len(steps) == 0 {
		t.Fatalf("%s: the quick-start block has no commands", readme)
	}
	return steps
}

// splitComment cuts a shell line at a " #" outside quotes.
func splitComment(line string) (command, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}

// runShell runs a command to its end, failing the test unless it exits 0, and returns what it
// printed.
func runShell(t *testing.T, dir string, env []string, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// shell is a command that runs until interrupted, in its own process group so that Ctrl-C
// reaches every process it starts (make, go run, the program), as in a terminal.
type shell struct {
	command string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	out     bytes.Buffer
}

func startShell(t *testing.T, dir string, env []string, command string) *shell {
	t.Helper()
	sh := &shell{command: command, done: make(chan struct{})}
	sh.cmd = exec.Command("bash", "-c", command)
	sh.cmd.Dir, sh.cmd.Env = dir, env
	sh.cmd.Stdout, sh.cmd.Stderr = sh, sh
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", command, err)
	}
	go func() {
		_ = sh.cmd.Wait()
		close(sh.done)
	}()
	return sh
}

func (sh *shell) Write(p []byte) (int, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.out.Write(p)
}

func (sh *shell) output() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.out.String()
}

func (sh *shell) exited() bool {
	select {
	case <-sh.done:
		return true
	default:
		return false
	}
}

// interrupt sends SIGINT to the command's process group, as Ctrl-C does, and waits for it to
// end; after a minute it kills the group.
func (sh *shell) interrupt(t *testing.T) {
	t.Helper()
	pgid := sh.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("interrupt %q: %v", sh.command, err)
	}
	select {
	case <-sh.done:
	case <-time.After(time.Minute):
		t.Errorf("%q did not stop within a minute of Ctrl-C", sh.command)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-sh.done
	}
}

// waitListening waits until something accepts connections at addr: the broker, once the command
// that starts it has compiled and opened its database. It fails if sh ends first.
func waitListening(t *testing.T, addr string, sh *shell) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if sh.exited() {
			t.Fatalf("%q ended (%v) while nothing listened at %s:\n%s", sh.command, sh.cmd.ProcessState, addr, sh.output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens at %s %s after starting %q: %v", addr, stepTimeout, sh.command, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
