package conformance

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// strictEnv names the environment variable that turns a missing language runtime from a skip into
// a failure, so CI cannot pass by silently testing fewer languages.
const strictEnv = "JOBWIRE_CONFORMANCE_STRICT"

// reportEnv names the environment variable holding a file to write the results table to; go test
// shows a passing package's output only with -v.
const reportEnv = "JOBWIRE_CONFORMANCE_REPORT"

// Paths prepared by TestMain and read by every test.
var (
	repoRoot     string
	brokerBin    string
	goWorkerBin  string
	buildSkipped bool // -short: nothing was built and every test skips
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		buildSkipped = true
		os.Exit(m.Run())
	}
	widenParallel()
	os.Exit(runMain(m))
}

// widenParallel lets every language run at once. The scenarios spend their time waiting on broker
// and worker processes, so the default limit of one test per CPU would only make them queue. An
// explicit -parallel wins.
func widenParallel() {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if explicit || f == nil {
		return
	}
	if n, err := strconv.Atoi(f.Value.String()); err == nil && n < len(languages) {
		_ = f.Value.Set(strconv.Itoa(len(languages)))
	}
}

// runMain builds the binaries the suite runs, runs the tests and prints the per-language table.
func runMain(m *testing.M) int {
	bin, err := os.MkdirTemp("", "jobwire-conformance-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := setup(bin); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		return 1
	}
	start := time.Now()
	code := m.Run()
	elapsed := time.Since(start)
	results.print(os.Stdout, elapsed)
	if path := os.Getenv(reportEnv); path != "" {
		if err := writeReport(path, elapsed); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			return 1
		}
	}
	return code
}

// writeReport writes the results table to path, for CI logs that do not show test output.
func writeReport(path string, elapsed time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	results.print(f, elapsed)
	return f.Close()
}

// setup finds the repository root and builds the broker and the Go worker into bin, once for the
// whole suite.
func setup(bin string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("repository root not found above the conformance folder: %w", err)
	}
	repoRoot = root
	goCmd, err := goTool()
	if err != nil {
		return err
	}
	brokerBin = filepath.Join(bin, "jobwire")
	goWorkerBin = filepath.Join(bin, "conformance_worker")
	for out, pkg := range map[string]string{brokerBin: "./cmd/jobwire", goWorkerBin: "./examples/go/conformance_worker"} {
		cmd := exec.Command(goCmd, "build", "-o", out, pkg)
		cmd.Dir = repoRoot
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
	}
	return nil
}

// goTool finds the go command: the one on PATH, else the one of the toolchain that built this test.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("the go command is neither on PATH nor in GOROOT")
	}
	return p, nil
}

// outcome is how one scenario of one language ended.
type outcome struct {
	status   string // PASS, FAIL or SKIP
	duration time.Duration
}

// resultTable collects outcomes from parallel subtests for the summary printed after the run.
type resultTable struct {
	mu        sync.Mutex
	scenarios []string
	byLang    map[string]map[string]outcome
}

var results = &resultTable{byLang: map[string]map[string]outcome{}}

func (r *resultTable) record(lang, scenario string, o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.scenarios, scenario) {
		r.scenarios = append(r.scenarios, scenario)
	}
	if r.byLang[lang] == nil {
		r.byLang[lang] = map[string]outcome{}
	}
	r.byLang[lang][scenario] = o
}

// print writes one row per scenario and one column per language, then the totals.
func (r *resultTable) print(w io.Writer, elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.scenarios) == 0 {
		return
	}
	var langs []string
	for _, st := range stores {
		for _, l := range languages {
			if col := column(l, st); r.byLang[col] != nil {
				langs = append(langs, col)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nconformance results (%s)\n", elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(tw, "scenario\t%s\t\n", strings.Join(langs, "\t"))
	for _, s := range r.scenarios {
		row := []string{s}
		for _, l := range langs {
			o, ok := r.byLang[l][s]
			switch {
			case !ok:
				row = append(row, "-")
			case o.duration == 0:
				row = append(row, o.status)
			default:
				row = append(row, fmt.Sprintf("%s %4.1fs", o.status, o.duration.Seconds()))
			}
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	row := []string{"passed"}
	for _, l := range langs {
		pass := 0
		for _, o := range r.byLang[l] {
			if o.status == "PASS" {
				pass++
			}
		}
		row = append(row, fmt.Sprintf("%d/%d", pass, len(r.scenarios)))
	}
	fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	_ = tw.Flush()
}
