package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// The Rust worker library's conformance worker is an example of the crate in sdks/rust, built
// once in release mode by cargo (make test builds it before the Go tests, so this finds it
// up to date). cargo --locked builds exactly the versions of the crate's Cargo.lock.

// rustTargetDir is where cargo builds the crate: the crate's own target/, which make test shares.
func rustTargetDir() string { return filepath.Join(repoRoot, "sdks", "rust", "target") }

// rustWorkerBin is the conformance worker that rustMissing builds.
func rustWorkerBin() string {
	return filepath.Join(rustTargetDir(), "release", "examples", "conformance_worker")
}

// rustMissing builds the conformance worker once and says why it cannot run, or "".
var rustMissing = sync.OnceValue(func() string {
	if _, err := exec.LookPath("cargo"); err != nil {
		return "cargo is not on PATH (.ci/run says how to install Rust)"
	}
	cmd := exec.Command("cargo", "build", "--quiet", "--locked", "--release", "--example", "conformance_worker",
		"--manifest-path", filepath.Join(repoRoot, "sdks", "rust", "Cargo.toml"))
	cmd.Env = append(os.Environ(), "CARGO_TARGET_DIR="+rustTargetDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("cargo build of sdks/rust's conformance worker failed: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return ""
})
