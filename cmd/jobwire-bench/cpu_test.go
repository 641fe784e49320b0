package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestProcessCPUGrowsWithWork(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	spinUntilItGrows(t, "this process's CPU time", func() (time.Duration, bool) { return processCPU(os.Getpid()) })
	if _, ok := processCPU(-1); ok {
		t.Fatal("read a CPU time of a process that cannot exist")
	}
}

// spinUntilItGrows spins this process until read's figure grows (at least one 10 ms tick of
// CPU), failing when it cannot be read or stays put for 10 s.
func spinUntilItGrows(t *testing.T, what string, read func() (time.Duration, bool)) {
	t.Helper()
	before, ok := read()
	if !ok {
		t.Fatalf("cannot read %s", what)
	}
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		if after, _ := read(); after > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed at %v while spinning (%d)", what, before, x)
		}
	}
}

// The machine's busy time is user, nice, system, irq and softirq from /proc/stat's first line,
// in ticks of 10 ms; idle, I/O wait and steal are not work of this machine's processes. The
// CPUs are the cpuN lines after it.
func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want time.Duration
		cpus int
		ok   bool
	}{
		{"every field", "cpu  100 20 30 5000 40 6 7 800 0 0\ncpu0 50 10 15 2500 20 3 3 400 0 0\ncpu1 50 10 15 2500 20 3 4 400 0 0\nintr 1 2\nctxt 9\n",
			(100 + 20 + 30 + 6 + 7) * 10 * time.Millisecond, 2, true},
		{"an old kernel's eight fields", "cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n", (1 + 2 + 3 + 6 + 7) * 10 * time.Millisecond, 1, true},
		{"idle only", "cpu 0 0 0 9999 0 0 0 0 0 0\n", 0, 0, true},
		{"a CPU's line first", "cpu0 1 2 3 4 5 6 7 8\n", 0, 0, false},
		{"too few fields", "cpu 1 2 3\n", 0, 0, false},
		{"not a number", "cpu 1 x 3 4 5 6 7 8\n", 0, 0, false},
		{"empty", "", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cpus, ok := parseProcStat(tt.stat)
			if got != tt.want || cpus != tt.cpus || ok != tt.ok {
				t.Errorf("parseProcStat(%q) = %v, %d, %v; want %v, %d, %v", tt.stat, got, cpus, ok, tt.want, tt.cpus, tt.ok)
			}
		})
	}
}

func TestProcessPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	rss, ok := processPeakRSS(os.Getpid())
	if !ok || rss < 1<<20 {
		t.Fatalf("peak RSS of this process = %d bytes (ok %v), want at least 1 MiB", rss, ok)
	}
	if _, ok := processPeakRSS(-1); ok {
		t.Fatal("read the peak RSS of a process that cannot exist")
	}
}

// A profiled process leaves its CPU profile and, beside it, its allocation profile.
func TestStartProfilesWritesCPUAndAllocations(t *testing.T) {
	dir := t.TempDir()
	stop, err := startProfiles(filepath.Join(dir, "broker-x.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	for _, name := range []string{"broker-x.pprof", "broker-x.allocs.pprof"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 {
			t.Errorf("%s is empty", name)
		}
	}
}
