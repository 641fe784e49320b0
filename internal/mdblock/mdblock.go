// Package mdblock reads fenced code blocks out of Markdown documents, so that tests can run the
// commands and programs a README shows instead of copies of them that could drift apart.
package mdblock

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Block is a fenced code block.
type Block struct {
	// Lang is the info string after the opening fence ("sh", "python"), or "".
	Lang string
	// Body is the text between the fences, each line ending in a newline.
	Body string
}

// After returns the first fenced block that follows a line starting with marker (such as an
// HTML comment "<!-- quickstart:"). Only ``` fences are recognised.
func After(doc []byte, marker string) (Block, error) {
	var (
		b               Block
		body            strings.Builder
		marked, inBlock bool
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !marked:
			marked = strings.HasPrefix(trimmed, marker)
		case !inBlock:
			if lang, ok := strings.CutPrefix(trimmed, "```"); ok {
				b.Lang, inBlock = strings.TrimSpace(lang), true
			}
		case trimmed == "```":
			b.Body = body.String()
			return b, nil
		default:
			body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return Block{}, err
	}
	switch {
	case !marked:
		return Block{}, fmt.Errorf("no line starts with %q", marker)
	case !inBlock:
		return Block{}, fmt.Errorf("no fenced block after the line starting with %q", marker)
	default:
		return Block{}, fmt.Errorf("the fenced block after %q is not closed", marker)
	}
}
