package main

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseResultLine(t *testing.T) {
	tests := []struct {
		line string
		want benchResult
		ok   bool
	}{
		{"drain            100000     6.23       16060         -         -      17.7      23.0      110.4   181.3  100000 queued",
			benchResult{"drain", 100000, 6.23}, true},
		{"latency            3000     3.00        1000      0.59      1.70         -         -          -    51.7  open loop",
			benchResult{"latency", 3000, 3.00}, true},
		{"river drain 100000 jobs 6.05s 16518 jobs/s (MaxWorkers 512)", benchResult{"river drain", 100000, 6.05}, true},
		{"asynq e2e-1 50000 jobs 5.59s 8945 jobs/s (Concurrency 512, 64 producers)", benchResult{"asynq e2e-1", 50000, 5.59}, true},
		{"faktory drain 20000 jobs 2.41s 8290 jobs/s (Concurrency 512; the second half 9000 jobs/s)",
			benchResult{"faktory drain", 20000, 2.41}, true},
		{"SCENARIO           JOBS  SECONDS      JOBS/S    P50 MS", benchResult{}, false},
		{"jobwire-bench: Intel(R) Xeon(R) Processor, 2 CPUs, go1.26.8, load average 0.50", benchResult{}, false},
		{"river latency 1000/s: p50 1.98 ms", benchResult{}, false},
		{"drain 0 0.00 0 -", benchResult{}, false},
		{"", benchResult{}, false},
	}
	for _, tt := range tests {
		got, ok := parseResultLine(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseResultLine(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

// A result's window starts at the sample nearest its seconds before the line: the machine's
// and the server's CPU between the two, divided by the result's jobs.
func TestResultWindowReadsTheSamplesAroundIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	script := []cpuSample{
		{at: t0, cpus: 2},
		{at: t0.Add(1 * time.Second), busy: 1 * time.Second, cpus: 2, server: 100 * time.Millisecond}, // the run begins here
		{at: t0.Add(2 * time.Second), busy: 2 * time.Second, cpus: 2, server: 600 * time.Millisecond},
		{at: t0.Add(3 * time.Second), busy: 4 * time.Second, cpus: 2, server: 1100 * time.Millisecond}, // the result's line
	}
	next := 0
	m := newCPUSampler(func() (cpuSample, error) { s := script[next]; next++; return s, nil })
	for range 3 {
		if _, err := m.take(); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	in := "some log line\nriver drain 1000 jobs 2.04s 490 jobs/s (MaxWorkers 512)\n"
	if err := passResults(strings.NewReader(in), &out, m, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "some log line" || !strings.HasPrefix(lines[1], "river drain 1000 jobs") {
		t.Fatalf("output %q: want the two lines passed through and one line after the result", lines)
	}
	// 3 s of busy CPU and 1 s of the server's over the 2 s from the second sample, for 1,000 jobs.
	for _, want := range []string{"machine-cpu: river drain: 3000.0 us a job of the machine", "its 2 CPUs 75% busy over 2.00 s",
		"the server's processes 1000.0 us a job"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("%q lacks %q", lines[2], want)
		}
	}
}

// A process that ended keeps the CPU it had used: a database's backends come and go with its
// connections, and a sum over the live ones alone went backwards.
func TestServerProcsKeepEndedProcesses(t *testing.T) {
	p := &serverProcs{name: "postgres"}
	if got := p.add(map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond}); got != 30*time.Millisecond {
		t.Fatalf("first reading sums to %v, want 30ms", got)
	}
	if got := p.add(map[int]time.Duration{1: 15 * time.Millisecond}); got != 35*time.Millisecond {
		t.Fatalf("after process 2 ended the sum is %v, want 35ms", got)
	}
}

// On the machine itself: a spinning test process shows in the machine's CPU and, picked by its
// name, in the server's.
func TestMachineCPUOfALiveRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	server := &serverProcs{name: strings.TrimSpace(string(comm))}
	m := newCPUSampler(func() (cpuSample, error) { return readCPUSample(server) })
	first, err := m.take()
	if err != nil {
		t.Fatal(err)
	}
	// The machine's ticks and this process's are counted apart: spin until each has grown.
	spinUntilItGrows(t, "the machine's CPU time", func() (time.Duration, bool) {
		busy, _, ok := readProcStat()
		return busy, ok
	})
	spinUntilItGrows(t, "this process's CPU time", func() (time.Duration, bool) { return processCPU(os.Getpid()) })
	var out strings.Builder
	if err := passResults(strings.NewReader("river drain 10 jobs 60.00s 1 jobs/s\n"), &out, m, true); err != nil {
		t.Fatal(err)
	}
	last := m.samples[len(m.samples)-1]
	if last.busy <= first.busy || last.server <= first.server || last.cpus < 1 {
		t.Errorf("samples %+v then %+v: want the machine's and this process's CPU to grow, and the CPUs counted", first, last)
	}
	if !strings.Contains(out.String(), "machine-cpu: river drain: ") || !strings.Contains(out.String(), "the server's processes") {
		t.Errorf("no window printed:\n%s", out.String())
	}
}

func TestMachineCPUCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{machineCPUCommand},
		{machineCPUCommand, "--"},
		{machineCPUCommand, "--no-such-flag", "--", "true"},
	} {
		if err := run(context.Background(), args); !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	if runtime.GOOS == "linux" {
		if err := run(context.Background(), []string{machineCPUCommand, "--", "sh", "-c", "exit 3"}); err == nil {
			t.Error("a command that failed was reported as a success")
		}
	}
}
