package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/mdblock"
	"github.com/jobwire/jobwire/job"
)

// The worker libraries install the way their ecosystems install, and the first worker each
// README shows runs from the installed package against a real broker.

// firstWorkerMarker starts the comment line that precedes a README's first-worker block.
const firstWorkerMarker = "<!-- first-worker:"

// readmeAddr is the broker address the READMEs' first workers use; the tests swap in their own.
const readmeAddr = "127.0.0.1:7070"

func TestInstalledPythonPackageRunsTheREADMEWorker(t *testing.T) {
	t.Parallel()
	lang := runtimeFor(t, "python")
	constraints := filepath.Join(repoRoot, "sdks", "python", "constraints.txt")
	pins := readPins(t, constraints)
	readme := filepath.Join(repoRoot, "sdks", "python", "README.md")
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	// The README names the tested versions; they must be the ones this test installs.
	for _, pkg := range []string{"grpcio", "protobuf"} {
		if want := pkg + " " + pins[pkg]; !bytes.Contains(doc, []byte(want)) {
			t.Fatalf("%s does not say %q, the version %s pins", readme, want, constraints)
		}
	}
	quiet := []string{"-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check"}
	// The wheels `make sdk-deps` downloaded for the pins: with them the index is not asked.
	fromPyPI := slices.Concat(quiet, []string{"-c", constraints})
	if wheels := filepath.Join(repoRoot, ".bin", "python-wheels"); fileExists(wheels) {
		fromPyPI = append(fromPyPI, "--no-index", "--find-links", wheels)
	}
	setups := []struct {
		name     string
		venv     []string // extra arguments of python -m venv
		pip      []string // python -m pip install ..., before the package's folder
		fromVenv bool     // grpc and protobuf are the venv's own, at the pinned versions
	}{
		// As the README says first: a fresh virtual environment, grpcio and protobuf from PyPI
		// at the tested versions constraints.txt pins.
		{name: "pypi", pip: fromPyPI, fromVenv: true},
		// As the README says for Debian: a virtual environment that sees the system's grpcio and
		// protobuf, and pip without the network, so the declared version ranges must admit them.
		{name: "debian", venv: []string{"--system-site-packages"},
			pip: slices.Concat(quiet, []string{"--no-index", "--no-build-isolation"})},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			if !s.fromVenv {
				if out, err := exec.Command(debianPython, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
					msg := fmt.Sprintf("%s cannot import Debian's grpc and protobuf (apt-get install python3-grpcio python3-protobuf): %s", debianPython, out)
					if os.Getenv(strictEnv) == "1" {
						t.Fatal(msg)
					}
					t.Skip(msg)
				}
			}
			scratch := t.TempDir()
			// Build from a copy, so that setuptools leaves its build/ and egg-info folders there.
			src := filepath.Join(scratch, "src")
			if err := os.CopyFS(src, os.DirFS(filepath.Join(repoRoot, "sdks", "python"))); err != nil {
				t.Fatal(err)
			}
			venv := filepath.Join(scratch, "venv")
			run(t, scratch, nil, debianPython, slices.Concat([]string{"-m", "venv"}, s.venv, []string{venv})...)
			python := filepath.Join(venv, "bin", "python")
			run(t, scratch, nil, python, slices.Concat(s.pip, []string{src})...)
			if got := strings.TrimSpace(run(t, scratch, nil, python, "-c", "import jobwire; print(jobwire.__file__)")); !strings.HasPrefix(got, venv) {
				t.Fatalf("jobwire was imported from %s, not from the package installed in %s", got, venv)
			}
			if s.fromVenv {
				for mod, pkg := range map[string]string{"grpc": "grpcio", "google.protobuf": "protobuf"} {
					got := strings.Fields(run(t, scratch, nil, python, "-c",
						"import "+mod+" as m; print(m.__file__, m.__version__)"))
					if len(got) != 2 || !strings.HasPrefix(got[0], venv) || got[1] != pins[pkg] {
						t.Fatalf("%s is %v, want version %s from the virtual environment %s (%s)", mod, got, pins[pkg], venv, constraints)
					}
				}
			}

			e := newEnv(t, lang, storeSQLite, brokerConfig{})
			script := filepath.Join(scratch, "app", "worker.py")
			writeREADMEWorker(t, readme, "python", e.broker.addr, script)
			w := e.spawn("installed-worker", []string{python, "-u", script})
			runREADMEJob(e, w)
		})
	}
}

// readPins returns the name==version lines of a pip constraints file, by name.
func readPins(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, version, ok := strings.Cut(strings.TrimSpace(line), "=="); ok && !strings.HasPrefix(name, "#") {
			pins[name] = version
		}
	}
	return pins
}

func TestPackedNodePackageRunsTheREADMEWorker(t *testing.T) {
	t.Parallel()
	lang := runtimeFor(t, "node")
	scratch := t.TempDir()
	// Pack a copy laid out like the repository, so that the pack scripts copy proto/ into the copy
	// and not into the package folder that other tests are using.
	pkg := filepath.Join(scratch, "repo", "sdks", "node")
	copyInto(t, filepath.Join(repoRoot, "proto"), filepath.Join(scratch, "repo", "proto"))
	for _, name := range []string{"package.json", "package-lock.json", "README.md", "index.d.ts", "src"} {
		copyInto(t, filepath.Join(repoRoot, "sdks", "node", name), filepath.Join(pkg, name))
	}
	out := run(t, scratch, nil, "npm", "pack", "--loglevel=error", pkg)
	tarball := lastLine(out)
	if !strings.HasSuffix(tarball, ".tgz") {
		t.Fatalf("npm pack did not name a tarball:\n%s", out)
	}

	app := filepath.Join(scratch, "app")
	writeAppLock(t, filepath.Join(repoRoot, "sdks", "node", "package-lock.json"), app, "file:../"+tarball)
	// The dependencies are the ones the package's own lock pins, which `npm ci` for the package
	// has cached; only a cold cache needs the registry.
	install := []string{"ci", "--no-audit", "--no-fund", "--loglevel=error"}
	if _, err := runErr(app, nil, "npm", append(install, "--offline")...); err != nil {
		run(t, app, nil, "npm", append(install, "--prefer-offline")...)
	}
	if got := strings.TrimSpace(run(t, app, nil, "node", "-p", "require.resolve('@jobwire/worker')")); !strings.HasPrefix(got, filepath.Join(app, "node_modules")) {
		t.Fatalf("@jobwire/worker resolved to %s, not to the installed package", got)
	}

	e := newEnv(t, lang, storeSQLite, brokerConfig{})
	script := filepath.Join(app, "worker.js")
	writeREADMEWorker(t, filepath.Join(repoRoot, "sdks", "node", "README.md"), "js", e.broker.addr, script)
	w := e.spawn("installed-worker", []string{"node", script})
	runREADMEJob(e, w)

	// The package's example, copied into the project as a reader would start from it, loads the
	// package the same way.
	example := filepath.Join(app, "greet.js")
	copyInto(t, filepath.Join(repoRoot, "sdks", "node", "examples", "worker.js"), example)
	ex := e.spawn("installed-example", []string{"node", example}, "JOBWIRE_ADDR="+e.broker.addr, "JOBWIRE_WORKER_ID=installed-example")
	id := e.enqueue("greet", []byte(`{"name":"Ada"}`))
	e.waitState(id, job.StateSucceeded)
	if log, err := os.ReadFile(ex.log); err != nil || !bytes.Contains(log, []byte("hello, Ada")) {
		t.Fatalf("the example's output lacks its greeting (%v):\n%s", err, log)
	}
}

// runtimeFor returns the language, skipping the test when its runtime is missing (failing it in
// strict mode, as the conformance suite does).
func runtimeFor(t *testing.T, name string) *language {
	t.Helper()
	if buildSkipped {
		t.Skip("skipped in -short mode: it installs a package and runs broker and worker processes")
	}
	for _, l := range languages {
		if l.name != name {
			continue
		}
		if reason := l.missing(); reason != "" {
			if os.Getenv(strictEnv) == "1" {
				t.Fatalf("%s runtime missing and %s=1: %s", name, strictEnv, reason)
			}
			t.Skipf("%s runtime missing: %s", name, reason)
		}
		return l
	}
	t.Fatalf("no language %q", name)
	return nil
}

// runREADMEJob enqueues the job the READMEs describe and waits for the worker w to run it.
func runREADMEJob(e *env, w *proc) {
	e.t.Helper()
	id := e.enqueue("email.send", []byte(`{"to":"ada@example.com"}`))
	e.waitState(id, job.StateSucceeded)
	want := "sent an email to ada@example.com"
	if log, err := os.ReadFile(w.log); err != nil || !bytes.Contains(log, []byte(want)) {
		e.t.Fatalf("the worker's output lacks %q (%v):\n%s", want, err, log)
	}
}

// writeREADMEWorker writes the fenced block after the first-worker marker of readme, which must
// be in language lang, to path, pointed at addr.
func writeREADMEWorker(t *testing.T, readme, lang, addr, path string) {
	t.Helper()
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	block, err := mdblock.After(doc, firstWorkerMarker)
	if err != nil {
		t.Fatalf("%s: %v", readme, err)
	}
	if block.Lang != lang {
		t.Fatalf("%s: the first worker is a %q block, want %q", readme, block.Lang, lang)
	}
	if !strings.Contains(block.Body, readmeAddr) {
		t.Fatalf("%s: the first worker does not connect to %s", readme, readmeAddr)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(block.Body, readmeAddr, addr)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAppLock makes dir a project that depends on the packed package at spec, with a lock file
// holding the package's own locked dependencies, so that `npm ci` installs exactly those.
func writeAppLock(t *testing.T, sdkLock, dir, spec string) {
	t.Helper()
	var lock struct {
		Packages map[string]map[string]any `json:"packages"`
	}
	b, err := os.ReadFile(sdkLock)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatalf("%s: %v", sdkLock, err)
	}
	root := lock.Packages[""]
	deps := map[string]any{"@jobwire/worker": spec}
	packages := map[string]any{
		"": map[string]any{"name": "app", "dependencies": deps},
		"node_modules/@jobwire/worker": map[string]any{
			"version":      root["version"],
			"resolved":     spec,
			"dependencies": root["dependencies"],
		},
	}
	for path, p := range lock.Packages {
		if path != "" && p["dev"] != true {
			packages[path] = p
		}
	}
	files := map[string]any{
		"package.json":      map[string]any{"name": "app", "private": true, "dependencies": deps},
		"package-lock.json": map[string]any{"name": "app", "lockfileVersion": 3, "requires": true, "packages": packages},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// copyInto copies a file or a folder to dst.
func copyInto(t *testing.T, src, dst string) {
	t.Helper()
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		err = os.CopyFS(dst, os.DirFS(src))
	} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
		var b []byte
		if b, err = os.ReadFile(src); err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// run runs a command in dir with extra environment variables, failing the test unless it
// succeeds, and returns its standard output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &cmdError{err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

// cmdError is a failed command with what it printed on stderr.
type cmdError struct {
	err    error
	stderr string
}

func (e *cmdError) Error() string { return e.err.Error() + "\n" + e.stderr }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// rustDependencyPath is the path the Rust README's dependency block gives the crate; the test
// swaps in the checkout's.
const rustDependencyPath = "../jobwire/sdks/rust"

func TestRustCrateRunsTheREADMEWorker(t *testing.T) {
	t.Parallel()
	lang := runtimeFor(t, "rust")
	readme := filepath.Join(repoRoot, "sdks", "rust", "README.md")
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := mdblock.After(doc, "<!-- dependencies:")
	if err != nil {
		t.Fatalf("%s: %v", readme, err)
	}
	if deps.Lang != "toml" || !strings.Contains(deps.Body, rustDependencyPath) {
		t.Fatalf("%s: the dependencies block is not toml naming %s:\n%s", readme, rustDependencyPath, deps.Body)
	}
	// A new project with the README's dependencies and the crate's own lock, so that cargo
	// picks the versions the crate pins and tests (from its cache, which building the
	// conformance worker filled; only a cold cache needs the registry).
	app := filepath.Join(t.TempDir(), "app")
	manifest := "[package]\nname = \"readme-worker\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n" +
		strings.ReplaceAll(deps.Body, rustDependencyPath, filepath.Join(repoRoot, "sdks", "rust"))
	if err := os.MkdirAll(filepath.Join(app, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "Cargo.toml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	copyInto(t, filepath.Join(repoRoot, "sdks", "rust", "Cargo.lock"), filepath.Join(app, "Cargo.lock"))
	e := newEnv(t, lang, storeSQLite, brokerConfig{})
	writeREADMEWorker(t, readme, "rust", e.broker.addr, filepath.Join(app, "src", "main.rs"))
	// The crate's target folder, where its release build of the same dependencies can be reused.
	env := []string{"CARGO_TARGET_DIR=" + rustTargetDir()}
	build := []string{"build", "--quiet", "--release", "--manifest-path", filepath.Join(app, "Cargo.toml")}
	if _, err := runErr(app, env, "cargo", append(build, "--offline")...); err != nil {
		run(t, app, env, "cargo", build...)
	}
	w := e.spawn("installed-worker", []string{filepath.Join(rustTargetDir(), "release", "readme-worker")})
	runREADMEJob(e, w)
}
