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

// Fenced is a fenced code block with where it stands in its document.
type Fenced struct {
	Block
	// Line is the line number of the opening fence, from 1.
	Line int
	// Note is the last HTML comment ("<!-- ... -->", on one line) between the previous block and
	// this one, without its delimiters, or "".
	Note string
}

// All returns every ``` fenced block of doc in order, with the HTML comment that precedes each.
// Fences may be indented, as inside a list.
func All(doc []byte) ([]Fenced, error) {
	var (
		blocks  []Fenced
		cur     Fenced
		body    strings.Builder
		inBlock bool
		note    string
		n       int
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			cur = Fenced{Block: Block{Lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}, Line: n, Note: note}
			body.Reset()
			inBlock, note = true, ""
		case !inBlock:
			if c, ok := strings.CutPrefix(trimmed, "<!--"); ok {
				if c, ok := strings.CutSuffix(c, "-->"); ok {
					note = strings.TrimSpace(c)
				}
			}
		case trimmed == "```":
			cur.Body = body.String()
			blocks = append(blocks, cur)
			inBlock = false
		default:
			body.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inBlock {
		return nil, fmt.Errorf("the fenced block at line %d is not closed", cur.Line)
	}
	return blocks, nil
}
