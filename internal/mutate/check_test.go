package main

import (
	"strings"
	"testing"
)

// root is the repository's root, seen from this package's directory (where go test runs).
const root = "../.."

// TestListApplies fails as soon as an entry of the list no longer fits the code: its text gone
// or doubled, its package or test renamed. It only reads files, so it is part of go test ./...
// at no cost, and a change that moves a guard fails here instead of in the next make mutate.
func TestListApplies(t *testing.T) {
	t.Parallel()
	ms := mutations()
	for _, err := range append(checkList(root, ms), alternativesExist(root, ms)...) {
		t.Error(err)
	}
}

// TestCheckListFindsRot: each kind of rot is reported, naming the mutation and the reason.
func TestCheckListFindsRot(t *testing.T) {
	t.Parallel()
	good := mutation{name: "good", file: "triage/triage.go",
		from: "if a.Number >= maxAttempts {", to: "if a.Number > maxAttempts {",
		pkgs: []string{"./triage"}}
	tests := []struct {
		name string
		edit func(*mutation)
		want string
	}{
		{"text gone", func(m *mutation) { m.from = "if a.Number >= maxAttempts+0 {" }, "0 times, want exactly once"},
		{"text twice", func(m *mutation) { m.from = "if " }, "times, want exactly once"},
		{"no change", func(m *mutation) { m.to = m.from }, "changes nothing"},
		{"does not parse", func(m *mutation) { m.to = "if a.Number >= maxAttempts {{" }, "does not parse"},
		{"file gone", func(m *mutation) { m.file = "triage/gone.go" }, "cannot read its file"},
		{"package gone", func(m *mutation) { m.pkgs = []string{"./triage/gone"} }, "has no test files"},
		{"no tests named", func(m *mutation) { m.pkgs = nil }, "names no tests"},
		{"test renamed", func(m *mutation) { m.run = "TestNoSuchTest" }, `selects no test function in ./triage`},
		{"bad pattern", func(m *mutation) { m.run = "Test(" }, "missing closing )"},
		{"unknown sdk", func(m *mutation) { m.sdk = "ruby" }, `unknown sdk "ruby"`},
		{"python test renamed", func(m *mutation) {
			m.sdk, m.pkgs, m.run = sdkPython, []string{"sdks/python/tests/test_worker_stream.py"}, "test_no_such_test"
		}, `no test in sdks/python/tests/test_worker_stream.py has a name containing "test_no_such_test"`},
		{"python wildcard", func(m *mutation) {
			m.sdk, m.pkgs, m.run = sdkPython, []string{"sdks/python/tests/test_worker_stream.py"}, "test_*"
		}, "plain substring"},
		{"node test renamed", func(m *mutation) {
			m.sdk, m.pkgs, m.run = sdkNode, []string{"sdks/node/test/worker.test.js"}, "^no such test$"
		}, `no test in sdks/node/test/worker.test.js has a name matching`},
		{"postgres outside Go", func(m *mutation) {
			m.sdk, m.pkgs, m.run, m.postgres = sdkNode, []string{"sdks/node/test/worker.test.js"}, "cancel", true
		}, "only Go tests use PostgreSQL"},
	}
	if errs := checkList(root, []mutation{good}); len(errs) != 0 {
		t.Fatalf("the unedited entry: %v", errs)
	}
	for _, tt := range tests {
		m := good
		tt.edit(&m)
		errs := checkList(root, []mutation{m})
		if len(errs) == 0 {
			t.Errorf("%s: no error, want one containing %q", tt.name, tt.want)
			continue
		}
		if msg := errs[0].Error(); !strings.Contains(msg, tt.want) || !strings.HasPrefix(msg, `mutation "good": `) {
			t.Errorf("%s: %q, want it to name the mutation and say %q", tt.name, msg, tt.want)
		}
	}

	dup := checkList(root, []mutation{good, good})
	if len(dup) != 1 || !strings.Contains(dup[0].Error(), "same name") {
		t.Errorf("two entries of one name: %v, want one error saying so", dup)
	}
	// One alternative of -run renamed, while the other still selects a test.
	m := good
	m.pkgs, m.run = []string{"./server"}, "TestSuccess$|TestNoSuchTest"
	if errs := checkList(root, []mutation{m}); len(errs) != 0 {
		t.Fatalf("checkList: %v, want the pattern accepted as a whole", errs)
	}
	errs := alternativesExist(root, []mutation{m})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `the part "TestNoSuchTest"`) {
		t.Errorf("alternativesExist = %v, want the renamed part named", errs)
	}
}

func TestSplitRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"TestA", []string{"TestA"}},
		{"TestA/sub", []string{"TestA", "sub"}},
		{"TestA|TestB/sub", []string{"TestA|TestB", "sub"}},
		{"Test(A/B)/x", []string{"Test(A/B)", "x"}},
		{"Test[/]/x", []string{"Test[/]", "x"}},
		{`Test\/x`, []string{`Test\/x`}},
	}
	for _, tt := range tests {
		if got := splitRun(tt.in); strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
			t.Errorf("splitRun(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTestNames(t *testing.T) {
	t.Parallel()
	py := pythonTestNames([]byte("class A(unittest.TestCase):\n    def test_x(self):\n        pass\n    async def test_y(self):\n        def test_inner(): pass\n    def helper(self): pass\n\nclass B:\n    def test_z(self): pass\n"))
	if got := strings.Join(py, " "); got != "A.test_x A.test_y B.test_z" {
		t.Errorf("pythonTestNames = %q", got)
	}
	js := nodeTestNames([]byte("test('one', async (t) => {});\n  it(\"two\", () => {});\ntest(`three`, () => {});\nfoo.test('not');\n"))
	if got := strings.Join(js, "|"); got != "one|two|three" {
		t.Errorf("nodeTestNames = %q", got)
	}
}
