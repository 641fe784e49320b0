package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// rustTest matches a test function of a crate's source: #[test] or #[tokio::test(...)], then
// its (async) fn.
var rustTest = regexp.MustCompile(`#\[(?:tokio::)?test(?:\([^)]*\))?\]\s*(?:async\s+)?fn\s+(\w+)`)

// cargoTotals matches the line cargo test prints for each test binary it ran.
var cargoTotals = regexp.MustCompile(`(?m)^test result: \w+\. (\d+) passed; (\d+) failed`)

// cargoBuildFailed matches what cargo prints when the crate or its tests do not compile (a
// failing test ends in "error: test failed", which is not that).
var cargoBuildFailed = regexp.MustCompile(`(?m)^error(\[E\d+\]: |: could not compile)`)

// runRustTests runs the tests of the crate that holds each of m's source files whose names
// contain m.run, in the release profile make test builds, offline.
func runRustTests(ctx context.Context, m mutation, timeout time.Duration) testRun {
	return eachFile(m, func(f string) testRun {
		crate := filepath.Dir(filepath.Dir(f)) // sdks/rust/src/worker.rs: sdks/rust
		r := command(ctx, timeout, exec.Command("cargo", "test", "--offline", "--locked", "--release",
			"--manifest-path", filepath.Join(crate, "Cargo.toml"), "--lib", "--", m.run))
		for _, t := range cargoTotals.FindAllSubmatch(r.out, -1) {
			passed, _ := strconv.Atoi(string(t[1]))
			failed, _ := strconv.Atoi(string(t[2]))
			r.ran += passed + failed
		}
		r.buildFailed = cargoBuildFailed.Match(r.out)
		return r
	})
}
