//go:build unix

package docblocks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/mdblock"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// blockTimeout bounds one block, a go run's compile included.
const blockTimeout = 3 * time.Minute

// envPostgresSocket names the directory of the test PostgreSQL server's Unix socket
// (scripts/with-postgres.sh sets it): inside a block's own network namespace the server's TCP
// port is out of reach, its socket is not.
const envPostgresSocket = "JOBWIRE_TEST_POSTGRES_SOCKET_DIR"

// docs lists the Markdown files whose command blocks run, from the repository's root; a glob.
var docs = []string{"README.md", "docs/*.md", "sdks/*/README.md"}

// shellLangs are the info strings of blocks that are commands.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// TestDocCommandBlocksRunAsWritten runs every shell block of the docs as a reader would paste it
// into a terminal of a checkout, with the `jobwire` command installed:
//
//   - in its own network namespace, so that the addresses the docs show (127.0.0.1:7070, ...)
//     are free, and in a scratch directory that holds the checkout's files (the blocks of one
//     document share it, so one block may use the files an earlier one made);
//   - a line whose comment says "until Ctrl-C" runs in the background, as in a terminal of its
//     own; after a broker's line the block waits until the broker listens, and at the block's
//     end each such command must still be running;
//   - a block that starts no broker of its own gets one on 127.0.0.1:7070, on a database the
//     blocks of its document share; when such a block starts a worker, the jobs it enqueued
//     must be worked by the block's end;
//   - $JOBWIRE_DB is a fresh schema of the test PostgreSQL server, which the docs name as the
//     variable that holds your database's URL;
//   - every other line must exit 0.
//
// A block is left out only by an HTML comment before it: "<!-- not run: REASON -->".
func TestDocCommandBlocksRunAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the broker and runs the docs' commands")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	netns := netnsCommand(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "jobwire"), "./cmd/jobwire")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/jobwire: %v\n%s", err, out)
	}
	var files []string
	for _, g := range docs {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := mdblock.All(doc)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		dir := checkoutView(t, root)
		for _, b := range blocks {
			if !shellLangs[b.Lang] {
				continue
			}
			name := fmt.Sprintf("%s:%d", rel, b.Line)
			t.Run(name, func(t *testing.T) {
				if reason, ok := strings.CutPrefix(b.Note, "not run:"); ok {
					if strings.TrimSpace(reason) == "" {
						t.Fatalf("%s: the block's \"not run:\" comment gives no reason", name)
					}
					t.Skipf("not run:%s", reason)
				}
				if strings.HasPrefix(b.Note, "quickstart:") {
					t.Skip("examples/go/quickstart/readme_test.go runs the quick start line by line")
				}
				needRuntimes(t, b.Body)
				script := blockScript(b.Body)
				env := readerEnv(bin)
				if strings.Contains(b.Body, "JOBWIRE_DB") {
					env = append(env, "JOBWIRE_DB="+postgresURL(t))
				}
				runBlock(t, netns, dir, env, name, b.Body, script)
			})
		}
	}
}

// netnsCommand returns the command that runs another in a new network namespace with only a
// loopback interface, or skips the test when this machine cannot make one.
func netnsCommand(t *testing.T) []string {
	t.Helper()
	for _, try := range [][]string{{"unshare", "--net"}, {"unshare", "--map-root-user", "--net"}} {
		if err := exec.Command(try[0], append(try[1:], "true")...).Run(); err == nil {
			return try
		}
	}
	t.Skip("cannot make a network namespace (unshare --net), which gives the docs' fixed addresses to each block")
	return nil
}

// checkoutView makes a scratch directory holding links to the checkout's top-level entries, so a
// block's relative paths (./cmd/jobwire, sdks/node/...) work while what it writes (jobwire.db,
// certificates) stays out of the checkout.
func checkoutView(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "jobwire.") || name == "bin" {
			continue // a developer's own database, lock and token files, and builds
		}
		if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readerEnv is a reader's environment: the installed jobwire first on PATH, no Jobwire settings
// and no make state inherited from whatever runs the test, and no network for Go modules (a
// block's namespace has none).
func readerEnv(bin string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			env = append(env, "PATH="+bin+string(os.PathListSeparator)+v)
		case strings.HasPrefix(k, "JOBWIRE_"), k == "MAKEFLAGS", k == "MFLAGS", k == "MAKELEVEL", k == "MAKEOVERRIDES":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GOPROXY=off", "GOFLAGS=-mod=mod")
}

// postgresURL returns a fresh schema of the test PostgreSQL server, reached through its Unix
// socket, or skips the block when there is no server.
func postgresURL(t *testing.T) string {
	t.Helper()
	sock := os.Getenv(envPostgresSocket)
	if sock == "" || os.Getenv(pgtest.EnvURL) == "" {
		if pgtest.Required() && os.Getenv(pgtest.EnvURL) == "" {
			t.Fatalf("the block uses $JOBWIRE_DB, a PostgreSQL database: run it under scripts/with-postgres.sh, which sets %s and %s", pgtest.EnvURL, envPostgresSocket)
		}
		t.Skipf("the block uses $JOBWIRE_DB, a PostgreSQL database: run under scripts/with-postgres.sh")
	}
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("host", sock)
	u.Host = ":" + u.Port()
	u.RawQuery = q.Encode()
	return u.String()
}

var (
	listenFlag   = regexp.MustCompile(`--listen[ =](\S+)`)
	startsBroker = regexp.MustCompile(`(^|[\s;&|(])(jobwire serve|make run|go run \./cmd/jobwire serve)\b`)
)

// blockScript turns a block into a bash script: lines joined at trailing backslashes, each line
// echoed before it runs, "until Ctrl-C" lines started in the background.
func blockScript(body string) string {
	var s strings.Builder
	s.WriteString(`set -eo pipefail
ip link set lo up 2>/dev/null || true
rm -f broker.log
bg=()
trap 'kill "${bg[@]}" 2>/dev/null; wait' EXIT
# wait_listening HOST:PORT PID waits until something accepts connections there, while the
# process PID that should listen there runs.
wait_listening() {
  local host=${1%:*} port=${1##*:}
  case $host in ""|0.0.0.0|"[::]") host=127.0.0.1 ;; esac
  for _ in $(seq 1200); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      wait "$2" && status=0 || status=$?
      echo "the command that should listen on $1 ended with status $status" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "nothing listens on $1 after a minute" >&2
  return 1
}
# wait_worked waits until the broker holds no job that waits or runs: the block's workers ran
# what it enqueued.
wait_worked() {
  for _ in $(seq 1200); do
    local busy=
    for s in pending leased running; do
      jobwire jobs list --state "$s" | grep -qx 'no jobs match' || busy=$s
    done
    [ -z "$busy" ] && return 0
    sleep 0.05
  done
  echo "the block's jobs were not worked within a minute:" >&2
  jobwire jobs list >&2
  return 1
}
`)
	lines := logicalLines(body)
	ownBroker := !startsBroker.MatchString(strings.Join(lines, "\n"))
	if ownBroker {
		s.WriteString("jobwire serve --db ./docs-broker.db >broker.log 2>&1 & bg+=($!)\nwait_listening 127.0.0.1:7070 $!\n")
	}
	for _, line := range lines {
		command, comment := splitComment(line)
		if command == "" {
			continue
		}
		fmt.Fprintf(&s, "printf '%%s\\n' %s\n", shellQuote("$ "+command))
		if !strings.Contains(comment, "until Ctrl-C") {
			s.WriteString(command + "\n")
			continue
		}
		fmt.Fprintf(&s, "( %s ) & bg+=($!)\n", command)
		if startsBroker.MatchString(command) {
			addr := "127.0.0.1:7070"
			if m := listenFlag.FindStringSubmatch(command); m != nil {
				addr = strings.Trim(m[1], `'"`)
			}
			fmt.Fprintf(&s, "wait_listening %s $!\n", shellQuote(addr))
		}
	}
	if ownBroker && strings.Contains(body, "until Ctrl-C") {
		s.WriteString("wait_worked\n")
	}
	s.WriteString(`for p in "${bg[@]}"; do
  if ! kill -0 "$p" 2>/dev/null; then echo "a command that should run until Ctrl-C has ended" >&2; exit 1; fi
done
`)
	return s.String()
}

// logicalLines splits a block into its command lines, joining those continued with a backslash.
func logicalLines(body string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(body) {
		line = strings.TrimRight(line, "\n")
		if c, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(c)
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.TrimSpace(cur.String()))
		cur.Reset()
	}
	return out
}

// splitComment cuts a shell line at a " #" outside quotes.
func splitComment(line string) (command, comment string) {
	if strings.HasPrefix(line, "#") {
		return "", line
	}
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
	return strings.TrimSpace(line), ""
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runBlock runs a block's script and fails with the document, the block's first line and what
// the commands printed when it does not end well.
func runBlock(t *testing.T, netns []string, dir string, env []string, name, body, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), blockTimeout)
	defer cancel()
	args := append(append([]string{}, netns[1:]...), "bash", "-c", script)
	cmd := exec.CommandContext(ctx, netns[0], args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err := cmd.Run()
	// Whatever the block left behind, a worker's compiled program under go run say, goes too.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err == nil {
		return
	}
	first, _, _ := strings.Cut(strings.TrimSpace(body), "\n")
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("still running after %s", blockTimeout)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "broker.log"))
	t.Fatalf("%s: the block starting %q does not run as written: %v\n---- output ----\n%s---- broker started for the block ----\n%s",
		name, first, err, out.String(), log)
}

// needRuntimes skips a block whose Python or Node.js runtime is missing, as the conformance suite
// does, unless JOBWIRE_CONFORMANCE_STRICT asks for every runtime.
func needRuntimes(t *testing.T, body string) {
	t.Helper()
	var missing string
	switch {
	case strings.Contains(body, "node "):
		if _, err := exec.LookPath("node"); err != nil {
			missing = "node is not on PATH"
		}
	case strings.Contains(body, "/usr/bin/python3 "):
		if err := exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf").Run(); err != nil {
			missing = "/usr/bin/python3 cannot import grpc and protobuf"
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("JOBWIRE_CONFORMANCE_STRICT") != "" {
		t.Fatalf("the block needs a runtime: %s", missing)
	}
	t.Skipf("the block needs a runtime: %s", missing)
}
