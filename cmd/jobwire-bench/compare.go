package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// compareCommand runs this benchmark against another commit's, interleaved, so that a claim
// about speed can be checked against the code before it in one sitting: the machine's slow and
// fast phases then fall on both sides alike.
const compareCommand = "compare"

const compareUsage = `Usage: jobwire-bench compare --ref COMMIT [--rounds N] [-- BENCH FLAGS]

Builds the broker and the benchmark of COMMIT and of the work tree, then runs the two benchmarks
in N interleaved rounds (base first in odd rounds, the work tree first in even ones) with the same
BENCH FLAGS, and prints each scenario's median per side and the ratio work tree / base.

Flags:
`

// side is one of the two builds a comparison runs.
type side struct {
	label  string
	bench  string // the benchmark binary
	broker string // the jobwire binary it runs
}

// compareConfig is the parsed command line of compare.
type compareConfig struct {
	ref       string
	rounds    int
	benchArgs []string
	keep      bool
}

func parseCompareFlags(args []string, out io.Writer) (compareConfig, error) {
	var c compareConfig
	fs := flag.NewFlagSet("jobwire-bench compare", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), compareUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.ref, "ref", "", "the commit (or branch, tag) to compare the work tree against; required")
	fs.IntVar(&c.rounds, "rounds", 3, "interleaved rounds: each runs both benchmarks once")
	fs.BoolVar(&c.keep, "keep", false, "keep the builds and each run's JSON results")
	if err := parseCommandLine(fs, args); err != nil {
		return c, err
	}
	c.benchArgs = fs.Args()
	bad := func(format string, a ...any) (compareConfig, error) {
		fmt.Fprintf(out, "jobwire-bench compare: "+format+"\n", a...)
		return c, errUsage
	}
	switch {
	case c.ref == "":
		return bad("--ref is required: the commit to compare the work tree against, e.g. --ref HEAD~1.")
	case c.rounds < 1:
		return bad("--rounds must be at least 1, got %d.", c.rounds)
	}
	for _, a := range c.benchArgs {
		name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
		if name == "json" || name == "broker-bin" || name == "cpuprofile" {
			return bad("the benchmark flag %q is set by compare itself; leave it out.", a)
		}
	}
	return c, nil
}

func runCompare(ctx context.Context, args []string) error {
	cfg, err := parseCompareFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "jobwire-bench-compare-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "keeping builds and results in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	rev, err := gitOutput(ctx, "rev-parse", "--verify", cfg.ref+"^{commit}")
	if err != nil {
		return fmt.Errorf("compare: %q is not a commit of this repository: %w", cfg.ref, err)
	}
	short := rev[:min(len(rev), 12)]
	fmt.Fprintf(os.Stderr, "building %s (%s)...\n", cfg.ref, short)
	baseSrc := filepath.Join(dir, "base-src")
	if err := exportCommit(ctx, rev, baseSrc); err != nil {
		return err
	}
	base, err := buildSide(ctx, cfg.ref+" ("+short+")", baseSrc, filepath.Join(dir, "base"))
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "building the work tree...")
	head, err := buildSide(ctx, "work tree", ".", filepath.Join(dir, "head"))
	if err != nil {
		return err
	}
	runs := map[string][][]result{}
	for round := range cfg.rounds {
		order := []side{base, head}
		if round%2 == 1 {
			order = []side{head, base}
		}
		for _, s := range order {
			fmt.Printf("round %d of %d: %s\n", round+1, cfg.rounds, s.label)
			rs, err := runSide(ctx, s, cfg.benchArgs, filepath.Join(dir, fmt.Sprintf("%s-%d.json", sideFile(s, base), round+1)))
			if err != nil {
				return fmt.Errorf("compare: round %d, %s: %w", round+1, s.label, err)
			}
			runs[s.label] = append(runs[s.label], rs)
		}
	}
	fmt.Println()
	printComparison(os.Stdout, compareRuns(runs[base.label], runs[head.label]), base.label)
	return nil
}

func sideFile(s, base side) string {
	if s == base {
		return "base"
	}
	return "head"
}

func gitOutput(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// exportCommit writes the tree of rev into dst with git archive, leaving the repository, its
// work tree and its list of work trees alone.
func exportCommit(ctx context.Context, rev, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpacking %s: %w", rev, err)
	}
	return nil
}

// buildSide builds the broker and the benchmark of the source tree src into out.
func buildSide(ctx context.Context, label, src, out string) (side, error) {
	out, err := filepath.Abs(out) // the builds run in src
	if err != nil {
		return side{}, err
	}
	s := side{label: label, bench: filepath.Join(out, "jobwire-bench"), broker: filepath.Join(out, "jobwire")}
	for bin, pkg := range map[string]string{s.bench: "./cmd/jobwire-bench", s.broker: "./cmd/jobwire"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("building %s of %s: %w\n%s", pkg, label, err, out)
		}
	}
	return s, nil
}

// runSide runs one benchmark with its own broker and reads back its results.
func runSide(ctx context.Context, s side, benchArgs []string, jsonPath string) ([]result, error) {
	args := append([]string{"--broker-bin", s.broker, "--json", jsonPath}, benchArgs...)
	cmd := exec.CommandContext(ctx, s.bench, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, err
	}
	var r struct {
		Results []result `json:"results"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("reading %s: %w", jsonPath, err)
	}
	return r.Results, nil
}

// samples are one side's results of a scenario over the rounds: jobs/s of each run, the
// latency percentiles of the runs that measure latency, and each of figureColumns of the runs
// that report it.
type samples struct {
	rate, p50, p99 []float64
	figures        [len(figureColumns)][]float64
}

// figureColumns are the figures a result may carry beside its rate and latency (0: not
// measured): the CPU a job and the share of the run its broker's writer was busy, in the order
// the comparison prints them.
var figureColumns = [...]struct {
	label string
	of    func(result) float64
}{
	{"  broker us/job", func(r result) float64 { return r.BrokerCPUus }},
	{"  worker us/job", func(r result) float64 { return r.WorkerCPUus }},
	{"  machine us/job", func(r result) float64 { return r.MachineCPUus }},
	{"  writer busy %", func(r result) float64 { return r.WriterBusyPct }},
}

// comparison is one scenario's samples on both sides.
type comparison struct {
	name       string
	base, head samples
}

// compareRuns gathers each scenario's results over the rounds, in the order scenarios first
// appear.
func compareRuns(base, head [][]result) []comparison {
	var out []comparison
	index := map[string]int{}
	add := func(runs [][]result, side func(c *comparison) *samples) {
		for _, run := range runs {
			for _, r := range run {
				i, ok := index[r.Name]
				if !ok {
					i = len(out)
					index[r.Name] = i
					out = append(out, comparison{name: r.Name})
				}
				s := side(&out[i])
				s.rate = append(s.rate, r.JobsPerSec)
				if r.Latency != nil {
					s.p50 = append(s.p50, r.Latency.P50ms)
					s.p99 = append(s.p99, r.Latency.P99ms)
				}
				for i, c := range figureColumns {
					if v := c.of(r); v > 0 {
						s.figures[i] = append(s.figures[i], v)
					}
				}
			}
		}
	}
	add(base, func(c *comparison) *samples { return &c.base })
	add(head, func(c *comparison) *samples { return &c.head })
	return out
}

// median is the middle value of xs (the mean of the two middle ones for an even count), or 0.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio is head over base, or "-" when either side has no result.
func ratio(base, head []float64) string {
	b, h := median(base), median(head)
	if len(base) == 0 || len(head) == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", h/b)
}

func spreadOf(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	return fmt.Sprintf(format+" ("+format+"-"+format+")", median(xs), lo, hi)
}

func printComparison(w io.Writer, cs []comparison, baseLabel string) {
	fmt.Fprintf(w, "medians (lowest-highest) over the rounds; ratio = work tree / %s\n", baseLabel)
	const f = "%-15s %-26s %-26s %7s\n"
	fmt.Fprintf(w, f, "SCENARIO", "BASE JOBS/S", "WORK TREE JOBS/S", "RATIO")
	for _, c := range cs {
		b, h := c.base, c.head
		fmt.Fprintf(w, f, c.name, spreadOf(b.rate, "%.0f"), spreadOf(h.rate, "%.0f"), ratio(b.rate, h.rate))
		if len(b.p50)+len(h.p50) > 0 {
			fmt.Fprintf(w, f, "  p50 ms", spreadOf(b.p50, "%.2f"), spreadOf(h.p50, "%.2f"), ratio(b.p50, h.p50))
			fmt.Fprintf(w, f, "  p99 ms", spreadOf(b.p99, "%.2f"), spreadOf(h.p99, "%.2f"), ratio(b.p99, h.p99))
		}
		for i, col := range figureColumns {
			if bc, hc := b.figures[i], h.figures[i]; len(bc)+len(hc) > 0 {
				fmt.Fprintf(w, f, col.label, spreadOf(bc, "%.1f"), spreadOf(hc, "%.1f"), ratio(bc, hc))
			}
		}
	}
}
