package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jobwire/jobwire/internal/percentile"
)

// latencyStats summarises latency samples, in milliseconds.
type latencyStats struct {
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50_ms"`
	P90ms   float64 `json:"p90_ms"`
	P99ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// summarize returns the percentiles of samples (nanoseconds), or nil for none.
func summarize(samples []int64) *latencyStats {
	if len(samples) == 0 {
		return nil
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	ms := func(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }
	return &latencyStats{Samples: len(s), P50ms: ms(percentile.NearestRank(s, 50)),
		P90ms: ms(percentile.NearestRank(s, 90)), P99ms: ms(percentile.NearestRank(s, 99)), MaxMs: ms(s[len(s)-1])}
}

const rowFormat = "%-13s %9s %8s %11s %9s %9s %9s %9s %10s %8s %7s  %s\n"

func printHeader() {
	fmt.Printf(rowFormat, "SCENARIO", "JOBS", "SECONDS", "JOBS/S", "P50 MS", "P99 MS", "BROKER US", "WORKER US", "MACHINE US", "WRITER %", "RSS MIB", "HOW")
}

func printRow(r result) {
	p50, p99 := "-", "-"
	if r.Latency != nil {
		p50, p99 = fmt.Sprintf("%.2f", r.Latency.P50ms), fmt.Sprintf("%.2f", r.Latency.P99ms)
	}
	cpu := func(us float64) string {
		if us <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", us)
	}
	how := r.Description
	if r.Errors > 0 {
		how += fmt.Sprintf(" (%d failed calls)", r.Errors)
	}
	fmt.Printf(rowFormat, r.Name, fmt.Sprint(r.Jobs), fmt.Sprintf("%.2f", r.Seconds), fmt.Sprintf("%.0f", r.JobsPerSec), p50, p99, cpu(r.BrokerCPUus), cpu(r.WorkerCPUus), cpu(r.MachineCPUus), cpu(r.WriterBusyPct), cpu(r.BrokerRSSMiB), how)
}

// machine describes where the numbers were taken.
type machine struct {
	CPU  string `json:"cpu"`
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Go   string `json:"go"`
	// LoadAvg is the 1-minute load average when the run started: a figure well above CPUs
	// means other programs competed for the machine and the numbers are low.
	LoadAvg string `json:"loadavg,omitempty"`
}

func machineInfo() machine {
	m := machine{CPU: "unknown CPU", CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg, _, _ = strings.Cut(string(data), " ")
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// report is the --json document.
type report struct {
	Time    time.Time   `json:"time"`
	Machine machine     `json:"machine"`
	Config  benchConfig `json:"config"`
	Results []result    `json:"results"`
}

func writeJSON(path string, m machine, cfg benchConfig, rs []result) error {
	data, err := json.MarshalIndent(report{Time: time.Now().UTC(), Machine: m, Config: cfg, Results: rs}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// spread is the range of one scenario's results over repeated runs.
type spread struct {
	name             string
	runs             int
	minRate, maxRate float64
	minP99, maxP99   float64
	hasLatency       bool
}

// spreads groups results by scenario, in the order the scenarios first appear.
func spreads(results []result) []spread {
	var out []spread
	index := map[string]int{}
	for _, r := range results {
		i, seen := index[r.Name]
		if !seen {
			i = len(out)
			index[r.Name] = i
			out = append(out, spread{name: r.Name, minRate: r.JobsPerSec, maxRate: r.JobsPerSec})
			if r.Latency != nil {
				out[i].hasLatency, out[i].minP99, out[i].maxP99 = true, r.Latency.P99ms, r.Latency.P99ms
			}
		}
		sp := &out[i]
		sp.runs++
		sp.minRate, sp.maxRate = min(sp.minRate, r.JobsPerSec), max(sp.maxRate, r.JobsPerSec)
		if r.Latency != nil && sp.hasLatency {
			sp.minP99, sp.maxP99 = min(sp.minP99, r.Latency.P99ms), max(sp.maxP99, r.Latency.P99ms)
		}
	}
	return out
}

// printSpread prints, per scenario, the lowest and highest throughput and p99 over its runs.
func printSpread(results []result) {
	fmt.Printf("%-13s %5s %21s %17s\n", "SCENARIO", "RUNS", "JOBS/S (MIN-MAX)", "P99 MS (MIN-MAX)")
	for _, sp := range spreads(results) {
		p99 := "-"
		if sp.hasLatency {
			p99 = fmt.Sprintf("%.2f-%.2f", sp.minP99, sp.maxP99)
		}
		fmt.Printf("%-13s %5d %21s %17s\n", sp.name, sp.runs, fmt.Sprintf("%.0f-%.0f", sp.minRate, sp.maxRate), p99)
	}
}
