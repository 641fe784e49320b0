// Package jobkey names a key taken from a job, such as the customer a job works for, so that a
// limit (a rate limit, a cap on running jobs) can count each key apart: one customer's backlog
// then cannot use up the limit of every other. A key is computed once, when the job is enqueued,
// and stored with the job, so dispatch compares strings and never reads a payload.
package jobkey

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Kind is where a key comes from.
type Kind int

const (
	// None: every job has the same key, so the limit counts all its jobs together.
	None Kind = iota
	// Type: the job's type.
	Type
	// Queue: the job's queue.
	Queue
	// Metadata: one metadata value the producer attached.
	Metadata
	// Payload: one field of a JSON object payload, found by a dotted path.
	Payload
)

// Expr is a parsed key expression. Its zero value is None.
type Expr struct {
	kind Kind
	name string   // the metadata key
	path []string // the payload field path
	text string
}

// Source is what a key is taken from.
type Source struct {
	Type     string
	Queue    string
	Metadata map[string]string
	Payload  []byte
}

// Parse reads a key expression: "" (one key for all jobs), "type", "queue", "metadata.NAME"
// or "payload.FIELD[.FIELD...]".
func Parse(s string) (Expr, error) {
	switch {
	case s == "":
		return Expr{}, nil
	case s == "type":
		return Expr{kind: Type, text: s}, nil
	case s == "queue":
		return Expr{kind: Queue, text: s}, nil
	case strings.HasPrefix(s, "metadata."):
		name := strings.TrimPrefix(s, "metadata.")
		if name == "" {
			return Expr{}, fmt.Errorf("key %q names no metadata key: write metadata.NAME", s)
		}
		return Expr{kind: Metadata, name: name, text: s}, nil
	case strings.HasPrefix(s, "payload."):
		path := strings.Split(strings.TrimPrefix(s, "payload."), ".")
		for _, p := range path {
			if p == "" {
				return Expr{}, fmt.Errorf("key %q has an empty field name: write payload.FIELD or payload.FIELD.SUBFIELD", s)
			}
		}
		return Expr{kind: Payload, path: path, text: s}, nil
	}
	return Expr{}, fmt.Errorf("key %q is not one of type, queue, metadata.NAME or payload.FIELD", s)
}

// Kind says where the key comes from.
func (e Expr) Kind() Kind { return e.kind }

// String returns the expression as Parse read it.
func (e Expr) String() string { return e.text }

// Of returns the key of a job. ok is false when the job has no such key (a missing metadata
// key, a payload that is not a JSON object or lacks the field, or a field that is an object or
// an array): the caller decides what such a job counts as. A string field is its own value;
// a number, a boolean or null is its JSON text.
func (e Expr) Of(src Source) (key string, ok bool) {
	switch e.kind {
	case None:
		return "", true
	case Type:
		return src.Type, true
	case Queue:
		return src.Queue, true
	case Metadata:
		v, ok := src.Metadata[e.name]
		return v, ok
	case Payload:
		return payloadField(src.Payload, e.path)
	}
	return "", false
}

func payloadField(payload []byte, path []string) (string, bool) {
	raw := json.RawMessage(payload)
	for _, field := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", false
		}
		var found bool
		if raw, found = obj[field]; !found {
			return "", false
		}
	}
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '{', '[':
		return "", false
	case '"':
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return "", false
		}
		return v, true
	}
	return string(raw), true
}
