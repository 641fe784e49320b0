package mdblock_test

import (
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/mdblock"
)

func TestAfter(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\n```sh\nnot this\n```\n\n<!-- run: this one -->\nSome text.\n\n```sh\nmake run   # terminal 1\n  indented\n```\n\n```sh\nnor this\n```\n"
	tests := []struct {
		name    string
		doc     string
		marker  string
		want    mdblock.Block
		wantErr string
	}{
		{"the block after the marker", doc, "<!-- run:", mdblock.Block{Lang: "sh", Body: "make run   # terminal 1\n  indented\n"}, ""},
		{"no marker", doc, "<!-- missing:", mdblock.Block{}, "no line starts with"},
		{"no block after the marker", "<!-- run: -->\ntext\n", "<!-- run:", mdblock.Block{}, "no fenced block"},
		{"unclosed block", "<!-- run: -->\n```python\nprint()\n", "<!-- run:", mdblock.Block{}, "not closed"},
		{"no language", "<!-- run: -->\n```\nx\n```\n", "<!-- run:", mdblock.Block{Body: "x\n"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := mdblock.After([]byte(tt.doc), tt.marker)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("After() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("After() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestAll(t *testing.T) {
	t.Parallel()
	doc := "# T\n\n<!-- not run: needs a second machine -->\n```sh\na\n```\n\ntext\n\n- item:\n  ```sh\n  b\n  ```\n"
	got, err := mdblock.All([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []mdblock.Fenced{
		{Block: mdblock.Block{Lang: "sh", Body: "a\n"}, Line: 4, Note: "not run: needs a second machine"},
		{Block: mdblock.Block{Lang: "sh", Body: "  b\n"}, Line: 11},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("All() = %+v, want %+v", got, want)
	}
	if _, err := mdblock.All([]byte("```sh\nx\n")); err == nil || !strings.Contains(err.Error(), "line 1 is not closed") {
		t.Fatalf("All(unclosed) error = %v", err)
	}
}
