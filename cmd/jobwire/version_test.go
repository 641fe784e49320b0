package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
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
