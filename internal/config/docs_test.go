package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jobwire/jobwire/internal/mdblock"
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
	parsed := 0
	for _, path := range append(files, filepath.Join(root, "README.md")) {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := mdblock.All(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, b := range blocks {
			if b.Lang != "yaml" {
				continue
			}
			parsed++
			if _, err := Parse([]byte(b.Body)); err != nil {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d: the configuration block does not parse:\n%v", rel, b.Line, err)
			}
		}
	}
	if parsed < 6 {
		t.Fatalf("found %d YAML blocks in the documents, want at least 6", parsed)
	}
}
