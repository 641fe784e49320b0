package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// updateDocs rewrites the generated command-line reference instead of comparing it: `make docs`.
var updateDocs = flag.Bool("update-docs", false, "rewrite docs/cli.md and the README's command synopsis from the commands' help")

const (
	cliDocPath = "../../docs/cli.md"
	readmePath = "../../README.md"
	// The README's synopsis is the text between these two lines.
	synopsisBegin = "<!-- cli-synopsis: generated from `jobwire help` by `make docs`; do not edit by hand -->"
	synopsisEnd   = "<!-- cli-synopsis end -->"
)

// TestCLIReferenceMatchesHelp keeps docs/cli.md and the README's synopsis in step with what the
// commands print for -h, so documented flags cannot drift from the real ones. `make docs`
// regenerates both.
func TestCLIReferenceMatchesHelp(t *testing.T) {
	clearJobwireEnv(t)
	doc := cliReference(t)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	newReadme, err := replaceBetween(string(readme), synopsisBegin, synopsisEnd, "```\n"+cliSynopsis(t)+"```\n")
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if *updateDocs {
		for path, text := range map[string]string{cliDocPath: doc, readmePath: newReadme} {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	old, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("%v: run `make docs` and commit docs/cli.md", err)
	}
	for _, f := range []struct{ path, got, want string }{
		{cliDocPath, string(old), doc},
		{readmePath, string(readme), newReadme},
	} {
		if f.got != f.want {
			t.Errorf("%s differs from the commands' help: run `make docs` and commit the result\n%s", filepath.Base(f.path), firstDifference(f.got, f.want))
		}
	}
}

// clearJobwireEnv hides JOBWIRE_* variables, which would otherwise show up as flag defaults.
func clearJobwireEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "JOBWIRE_") {
			t.Setenv(k, "")
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// helpText runs `jobwire help ARGS...` and returns what it printed.
func helpText(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, nil, append([]string{"help"}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("jobwire help %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// cliReference renders docs/cli.md: the overview of `jobwire help`, then every command's help.
func cliReference(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("<!-- Generated from the commands' own help by `make docs`; do not edit by hand. -->\n\n")
	b.WriteString("Get the command with `go install github.com/jobwire/jobwire/cmd/jobwire@latest` (it lands in\n")
	b.WriteString("`$(go env GOPATH)/bin`), or `make build` in a checkout (`./bin/jobwire`). In a checkout,\n")
	b.WriteString("`go run ./cmd/jobwire` runs it without installing.\n\n")
	fmt.Fprintf(&b, "## jobwire help\n\n```\n%s```\n", helpText(t))
	for _, c := range commands {
		fmt.Fprintf(&b, "\n## jobwire %s\n\n```\n%s```\n", c.name, helpText(t, strings.Fields(c.name)...))
	}
	return b.String()
}

// cliSynopsis is one usage line per command, each the first line of the command's help.
func cliSynopsis(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range commands {
		first, _, _ := strings.Cut(helpText(t, strings.Fields(c.name)...), "\n")
		b.WriteString(strings.TrimPrefix(first, "Usage: ") + "\n")
	}
	return b.String()
}

// replaceBetween replaces the lines strictly between the line begin and the line end.
func replaceBetween(text, begin, end, with string) (string, error) {
	i := strings.Index(text, begin+"\n")
	if i < 0 {
		return "", fmt.Errorf("no line %q", begin)
	}
	i += len(begin) + 1
	j := strings.Index(text[i:], end+"\n")
	if j < 0 {
		return "", fmt.Errorf("no line %q after %q", end, begin)
	}
	return text[:i] + with + text[i+j:], nil
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  now:  %q\n  help: %q", i+1, gl, wl)
		}
	}
	return ""
}
