package auth

import (
	"fmt"
	"strings"
)

// Scope limits a producer or worker token to some queues and job types. An empty list allows
// any name. A pattern is a name in which '*' stands for any run of characters, so "email.*"
// covers "email.send" and "email.bulk.send", and "*" covers everything.
type Scope struct {
	Queues []string
	Types  []string
}

// Unrestricted reports whether the scope allows every queue and type.
func (s Scope) Unrestricted() bool { return len(s.Queues) == 0 && len(s.Types) == 0 }

// AllowsQueue reports whether the scope covers queue.
func (s Scope) AllowsQueue(queue string) bool { return matchAny(s.Queues, queue) }

// AllowsType reports whether the scope covers job type typ.
func (s Scope) AllowsType(typ string) bool { return matchAny(s.Types, typ) }

func (s Scope) String() string {
	q, t := "any queue", "any job type"
	if len(s.Queues) > 0 {
		q = "queues " + strings.Join(s.Queues, ", ")
	}
	if len(s.Types) > 0 {
		t = "job types " + strings.Join(s.Types, ", ")
	}
	return q + "; " + t
}

func matchAny(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Match reports whether name matches pattern, where each '*' in pattern matches any run of
// characters (none included) and every other character matches itself.
func Match(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return strings.HasSuffix(name, last)
}

// MaxPatterns and MaxPatternLen bound a scope, which is checked on every call.
const (
	MaxPatterns   = 64
	MaxPatternLen = 255
)

// ValidatePatterns checks the patterns of one scope list; field names it in the error.
func ValidatePatterns(field string, patterns []string) error {
	if len(patterns) > MaxPatterns {
		return fmt.Errorf("%s: at most %d patterns, got %d", field, MaxPatterns, len(patterns))
	}
	for _, p := range patterns {
		if p == "" || len(p) > MaxPatternLen {
			return fmt.Errorf("%s: each pattern must be 1..%d characters, got %q", field, MaxPatternLen, p)
		}
		if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ',' || r == ' ' }) {
			return fmt.Errorf("%s: pattern %q holds a space, comma or control character", field, p)
		}
	}
	return nil
}
