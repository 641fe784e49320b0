package main

import (
	"archive/zip"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	t.Parallel()
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name   string
		linked string
		info   *debug.BuildInfo
		want   string
	}{
		{"make build", "v1.4.0-3-g1234abc", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v1.4.0-3-g1234abc"},
		{"go install at a version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"go build in a checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101000000-0123456789ab+dirty"}}, "v0.0.0-20260101000000-0123456789ab+dirty"},
		{"go run with vcs info", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "false")}, "(devel) 0123456789ab"},
		{"modified checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "true")}, "(devel) 0123456789ab-dirty"},
		{"nothing known", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"no build info", "", nil, "(devel)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := versionOf(tt.linked, tt.info); got != tt.want {
				t.Errorf("versionOf(%q, ...) = %q, want %q", tt.linked, got, tt.want)
			}
		})
	}
}

// TestMakeBuildStampsGitDescribe builds the binary the way the README says, with `make build`,
// and checks that `jobwire version` prints what git describe says about the checkout.
func TestMakeBuildStampsGitDescribe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	describe := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	describe.Dir = root
	want, err := describe.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	bin := t.TempDir()
	build := exec.Command("make", "-s", "build", "BINDIR="+bin)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "jobwire"), "version").Output()
	if err != nil {
		t.Fatalf("jobwire version: %v", err)
	}
	if got, want := strings.TrimSpace(string(out)), "jobwire "+strings.TrimSpace(string(want)); got != want {
		t.Errorf("jobwire version printed %q, want %q", got, want)
	}
}

// TestGoInstallReportsTheModuleVersion installs the command the way the README says, with
// `go install github.com/jobwire/jobwire/cmd/jobwire@VERSION`, from a module proxy in a folder
// that serves this checkout, and checks that `jobwire version` prints VERSION. Dependencies come
// from the local module cache, so the test needs no network.
func TestGoInstallReportsTheModuleVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env: %v", err)
	}
	modCache := strings.TrimSpace(string(out))
	// A version of its own for each run: the module cache would otherwise answer a later run
	// with an earlier run's code. The cache's copy is removed when the test ends.
	version := fmt.Sprintf("v0.0.0-installtest.%d", rand.Uint64())
	t.Cleanup(func() { removeFromModuleCache(t, modCache, version) })
	proxy := t.TempDir()
	writeModuleProxy(t, proxy, root, version, strings.Split(strings.TrimRight(string(files), "\x00"), "\x00"))

	bin := t.TempDir()
	install := exec.Command("go", "install", "github.com/jobwire/jobwire/cmd/jobwire@"+version)
	install.Dir = bin
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOSUMDB=off", "GOTOOLCHAIN=local", "GOFLAGS=-modcacherw",
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(modCache, "cache", "download"))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(bin, "jobwire"), "version").Output()
	if err != nil {
		t.Fatalf("jobwire version: %v", err)
	}
	if got, want := strings.TrimSpace(string(out)), "jobwire "+version; got != want {
		t.Errorf("jobwire version printed %q, want %q", got, want)
	}
}

// writeModuleProxy lays out dir as a GOPROXY serving the files of the checkout at root as
// github.com/jobwire/jobwire@version. Folders with their own go.mod are other modules and stay
// out, as in a published module.
func writeModuleProxy(t *testing.T, dir, root, version string, files []string) {
	t.Helper()
	const module = "github.com/jobwire/jobwire"
	var nested []string
	for _, f := range files {
		if filepath.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, filepath.Dir(f)+"/")
		}
	}
	v := filepath.Join(dir, module, "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(v, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	for _, f := range files {
		if slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(f, n) }) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(module + "@" + version + "/" + f)
		if err == nil {
			_, err = w.Write(b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(zw.Close(), zf.Close()); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"list":            version + "\n",
		version + ".mod":  string(gomod),
		version + ".info": `{"Version":"` + version + `","Time":"2026-01-01T00:00:00Z"}`,
	} {
		if err := os.WriteFile(filepath.Join(v, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// removeFromModuleCache deletes what installing github.com/jobwire/jobwire@version left in the
// module cache (made writable by -modcacherw).
func removeFromModuleCache(t *testing.T, modCache, version string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(modCache, "cache", "download", "github.com", "jobwire", "jobwire", "@v", version+".*"))
	if err != nil {
		t.Error(err)
	}
	for _, p := range append(paths, filepath.Join(modCache, "github.com", "jobwire", "jobwire@"+version)) {
		if err := os.RemoveAll(p); err != nil {
			t.Errorf("cleaning the module cache: %v", err)
		}
	}
}
