package config

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every YAML block of the README and docs/*.md is a broker configuration file, or a part of
// one, and parses as written: a key renamed or misspelt in a document fails here, not in the
// hands of an operator who copied it. (YAML of another tool, a Compose file say, would take
// another fence, such as ```yml.)
func TestDocumentedConfigurationParses(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, path := range append(files, filepath.Join(root, "README.md")) {
		for _, b := range yamlBlocks(t, path) {
			blocks++
			if _, err := Parse([]byte(b.text)); err != nil {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: the configuration block does not parse:\n%v", rel, b.line, err)
			}
		}
	}
	if blocks < 6 {
		t.Fatalf("found %d YAML blocks in the documents, want at least 6", blocks)
	}
}

// yamlBlock is the text of a ```yaml block, its indentation removed, and the line it starts on.
type yamlBlock struct {
	text string
	line int
}

// yamlBlocks reads the ```yaml blocks of the Markdown file at path.
func yamlBlocks(t *testing.T, path string) []yamlBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []yamlBlock
	var cur *yamlBlock
	indent := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```yaml":
			cur, indent = &yamlBlock{line: n}, line[:strings.Index(line, "```")]
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
