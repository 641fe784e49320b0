package main

import (
	"strings"
	"testing"
)

// goJSON is go test -json output: one event a line.
func goJSON(events ...string) []byte { return []byte(strings.Join(events, "\n") + "\n") }

func TestReadGoJSON(t *testing.T) {
	t.Parallel()
	const pkg = `"Package":"github.com/jobwire/jobwire/server"`
	tests := []struct {
		name        string
		out         []byte
		ran         int
		buildFailed bool
		deepest     int
	}{
		{"a passing test", goJSON(`{"Action":"run",`+pkg+`,"Test":"TestA"}`, `{"Action":"pass",`+pkg+`,"Test":"TestA"}`,
			`{"Action":"pass",`+pkg+`}`), 1, false, 1},
		{"a subtest", goJSON(`{"Action":"pass",`+pkg+`,"Test":"TestA/sub/leaf"}`, `{"Action":"fail",`+pkg+`,"Test":"TestA"}`),
			2, false, 3},
		{"skipped tests did not run", goJSON(`{"Action":"skip",`+pkg+`,"Test":"TestA"}`, `{"Action":"pass",`+pkg+`}`), 0, false, 0},
		{"a build failure", goJSON(`{"ImportPath":"x","Action":"build-output","Output":"x.go:1: bad\n"}`,
			`{"Action":"fail",`+pkg+`,"FailedBuild":"github.com/jobwire/jobwire/server"}`), 0, true, 0},
		{"a crash before any test", goJSON(`{"Action":"output",`+pkg+`,"Output":"panic: init\n"}`, `{"Action":"fail",`+pkg+`}`),
			0, false, 0},
	}
	for _, tt := range tests {
		r := testRun{out: tt.out}
		r.readGoJSON()
		if r.ran != tt.ran || r.buildFailed != tt.buildFailed || r.deepest != tt.deepest {
			t.Errorf("%s: ran %d, build failed %t, deepest %d; want %d, %t, %d",
				tt.name, r.ran, r.buildFailed, r.deepest, tt.ran, tt.buildFailed, tt.deepest)
		}
		if r.ran > 0 && r.perPkg["server"] != r.ran {
			t.Errorf("%s: by package %v, want server: %d", tt.name, r.perPkg, r.ran)
		}
	}
}

// An unmutated run proves something only when it passed and ran a test in every package, down
// to the last level of its pattern.
func TestCleanPass(t *testing.T) {
	t.Parallel()
	m := mutation{name: "m", pkgs: []string{"./server", "./store/sqlite"}, run: "TestA/sub"}
	both := map[string]int{"server": 1, "store/sqlite": 1}
	tests := []struct {
		name string
		r    testRun
		want string // "" for none
	}{
		{"passed", testRun{ran: 2, perPkg: both, deepest: 2}, ""},
		{"failed", testRun{ran: 2, perPkg: both, deepest: 2, failed: true}, "fail without any mutation"},
		{"nothing ran", testRun{perPkg: map[string]int{}}, "no test ran"},
		{"a package ran nothing", testRun{ran: 1, perPkg: map[string]int{"server": 1}, deepest: 2}, "no test ran in ./store/sqlite"},
		{"no subtest ran", testRun{ran: 2, perPkg: both, deepest: 1}, "no subtest ran at level 2"},
	}
	for _, tt := range tests {
		err := tt.r.cleanPass(m)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

func TestTapCount(t *testing.T) {
	t.Parallel()
	out := []byte("ok 1 - a\nnot ok 2 - b\n# tests 20\n# pass 1\n# fail 1\n# skipped 18\n")
	if p, f := tapCount(out, "pass"), tapCount(out, "fail"); p != 1 || f != 1 {
		t.Errorf("pass %d, fail %d; want 1, 1", p, f)
	}
}
