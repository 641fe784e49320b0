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
	before, ok := processCPU(os.Getpid())
	if !ok {
		t.Fatal("cannot read this process's CPU time")
	}
	// Spin until the reading moves: at least one 10 ms tick of CPU.
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, _ := processCPU(os.Getpid())
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v while spinning (%d)", before, x)
		}
	}
	if _, ok := processCPU(-1); ok {
		t.Fatal("read a CPU time of a process that cannot exist")
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
