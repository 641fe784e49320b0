package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwire/jobwire/internal/editdist"
)

// Error is one mistake in a configuration document: one sentence naming the key, in the
// file's own words (no Go types), and the line it is on when there is one.
type Error struct {
	Line int    // 1-based; 0 when the mistake is on no line (a default that clashes with a setting)
	Msg  string // "unknown key \"retyr\" (did you mean \"retry\"?)"
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// checker walks a YAML document against the File struct before it is decoded, so that every
// mistake yaml would report in Go's terms ("field retyr not found in type config.File",
// "cannot unmarshal !!int `30` into time.Duration") is reported in the file's terms instead,
// and remembers the line of every key for the checks that follow decoding.
type checker struct {
	errs  []error
	lines map[string]int // dotted key ("retry.base_delay") -> line
}

func (c *checker) fail(line int, format string, args ...any) {
	c.errs = append(c.errs, &Error{Line: line, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// check walks node, the value of key path (dotted, "" for the document), against type t.
func (c *checker) check(node *yaml.Node, t reflect.Type, path string) {
	if node.Kind == yaml.AliasNode && node.Alias != nil {
		node = node.Alias
	}
	if node.Kind == yaml.ScalarNode && node.ShortTag() == "!!null" {
		return // an empty value leaves the default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // a type that reads itself from YAML says what is wrong when decoded
	}
	name := path
	if name == "" {
		name = "the file"
	}
	switch {
	case t == durationType:
		if node.Kind != yaml.ScalarNode {
			c.fail(node.Line, "%s must be a duration such as 30s, 5m or 1h, not a %s", name, kindName(node))
			return
		}
		if node.ShortTag() != "!!str" {
			if _, err := strconv.ParseFloat(node.Value, 64); err == nil {
				c.fail(node.Line, "%s: %s is not a duration (write %ss)", name, node.Value, node.Value)
				return
			}
		}
		if _, err := time.ParseDuration(node.Value); err != nil {
			c.fail(node.Line, "%s: %q is not a duration (write e.g. 30s, 5m or 1h)", name, node.Value)
		}
	case t.Kind() == reflect.Struct:
		if node.Kind != yaml.MappingNode {
			c.fail(node.Line, "%s must be a mapping of keys, not a %s", name, kindName(node))
			return
		}
		keys := yamlKeys(t)
		c.mapping(node, path, func(key *yaml.Node, val *yaml.Node, sub string) {
			f, ok := keys[key.Value]
			if !ok {
				c.fail(key.Line, "unknown key %q%s%s", key.Value, inName(path), suggest(key.Value, keys))
				return
			}
			c.check(val, f.Type, sub)
		})
	case t.Kind() == reflect.Map:
		if node.Kind != yaml.MappingNode {
			c.fail(node.Line, "%s must be a mapping, not a %s", name, kindName(node))
			return
		}
		c.mapping(node, path, func(_, val *yaml.Node, sub string) { c.check(val, t.Elem(), sub) })
	case t.Kind() == reflect.Slice:
		if node.Kind != yaml.SequenceNode {
			c.fail(node.Line, "%s must be a list such as [a, b], not a %s", name, kindName(node))
			return
		}
		for i, item := range node.Content {
			c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case node.Kind != yaml.ScalarNode:
		c.fail(node.Line, "%s must be a single value, not a %s", name, kindName(node))
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if node.ShortTag() != "!!int" {
			c.fail(node.Line, "%s: %q is not a whole number", name, node.Value)
		}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		if node.ShortTag() != "!!int" && node.ShortTag() != "!!float" {
			c.fail(node.Line, "%s: %q is not a number", name, node.Value)
		}
	case t.Kind() == reflect.Bool:
		if node.ShortTag() != "!!bool" {
			c.fail(node.Line, "%s: %q is not true or false", name, node.Value)
		}
	}
}

// mapping checks a mapping's keys for repeats, records their lines and calls each for every
// key and value.
func (c *checker) mapping(node *yaml.Node, path string, each func(key, val *yaml.Node, sub string)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		sub := key.Value
		if path != "" {
			sub = path + "." + key.Value
		}
		if first, dup := seen[key.Value]; dup {
			c.fail(key.Line, "key %q%s appears twice (first on line %d)", key.Value, inName(path), first)
			continue
		}
		seen[key.Value] = key.Line
		c.lines[sub] = key.Line
		each(key, val, sub)
	}
}

// lineOf finds the line of the key a message starts with ("retry.base_delay must be ..."), or
// of the nearest enclosing key that is in the file.
func (c *checker) lineOf(msg string) int {
	key, _, _ := strings.Cut(msg, " ")
	key = strings.TrimSuffix(key, ":")
	for key != "" {
		if l, ok := c.lines[key]; ok {
			return l
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func inName(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "single value"
}

// yamlKeys maps the yaml keys of struct type t to its fields.
func yamlKeys(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			out[name] = f
		}
	}
	return out
}

// goToYAML maps the Go field names of struct type t to its yaml keys, for messages of
// validators that speak of fields ("Threshold must be at least 1").
func goToYAML(t reflect.Type) map[string]string {
	out := map[string]string{}
	for name, f := range yamlKeys(t) {
		out[f.Name] = name
	}
	return out
}

// suggest proposes the known key nearest to key, or lists the keys when there are few.
func suggest[V any](key string, known map[string]V) string {
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	best, bestD := "", 3
	for _, k := range names {
		if d := editdist.Distance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		for _, k := range names {
			if strings.HasPrefix(k, key) || strings.HasPrefix(key, k) {
				best = k
				break
			}
		}
	}
	switch {
	case best != "":
		return fmt.Sprintf(" (did you mean %q?)", best)
	case len(names) <= 10:
		return " (known keys: " + strings.Join(names, ", ") + ")"
	}
	return ""
}

// syntaxError rewords yaml's parse errors ("yaml: line 3: mapping values are not allowed in
// this context") as an Error on that line.
func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return &Error{Line: line, Msg: "not valid YAML: " + text}
			}
		}
	}
	return &Error{Msg: "not valid YAML: " + msg}
}

// splitJoined returns the errors errors.Join combined, or err alone.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitJoined(e)...)
		}
		return out
	}
	return []error{err}
}

// renamed rewrites a validator's message about Go fields in the file's terms: the prefix
// naming the package ("storeretry: ", "invalid breaker config: ") goes, each Go field name
// becomes its yaml key, and the message is put under path ("breaker.threshold must be ...").
func renamed(err error, strip string, names map[string]string, path string) string {
	msg := strings.TrimPrefix(err.Error(), strip)
	words := strings.Fields(msg)
	for i, w := range words {
		core := strings.TrimRight(w, ",.;:")
		if y, ok := names[core]; ok {
			words[i] = y + w[len(core):]
		}
	}
	return path + "." + strings.Join(words, " ")
}

// wrapPath is the message of err under path: "retry." + "base_delay must be positive".
func wrapPath(path string, err error) []string {
	var out []string
	for _, e := range splitJoined(err) {
		out = append(out, path+"."+e.Error())
	}
	return out
}

// errorsAt turns messages that start with a key into Errors on that key's line.
func (c *checker) errorsAt(msgs []string) {
	for _, m := range msgs {
		c.errs = append(c.errs, &Error{Line: c.lineOf(m), Msg: m})
	}
}

// asErrors is the checker's findings as one error, nil for none.
func (c *checker) asErrors() error {
	if len(c.errs) == 0 {
		return nil
	}
	// In the file's order; mistakes on no line last.
	order := func(err error) int {
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			return e.Line
		}
		return math.MaxInt
	}
	sort.SliceStable(c.errs, func(i, j int) bool { return order(c.errs[i]) < order(c.errs[j]) })
	return errors.Join(c.errs...)
}
