package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// newTable starts an aligned table; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated table row. String cells pass through display, so a worker id,
// an error message or a queue name cannot move the cursor or break the table; numbers and the
// fixed headers are printed as they are.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		if s, ok := c.(string); ok {
			c = display(s)
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprint(w, "\n")
}

// display makes a string that came from a user or a worker safe to print on a terminal:
// control characters (escape sequences, carriage returns, newlines, tabs, C1 codes), Unicode
// bidirectional overrides and bytes that are not UTF-8 are shown as Go escapes such as \x1b,
// \n or \u202e, so the text reads as it was sent and cannot steer the terminal. Everything
// else, quotes and backslashes included, is left as it is.
func display(s string) string {
	clean := true
	for i, r := range s {
		if needsEscape(r) || (r == utf8.RuneError && !isRealReplacement(s[i:])) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case needsEscape(r):
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether r must not reach a terminal as it is.
func needsEscape(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// isRealReplacement reports whether s starts with an encoded U+FFFD rather than a bad byte.
func isRealReplacement(s string) bool {
	_, size := utf8.DecodeRuneInString(s)
	return size > 1
}

// displayLines is display for text whose line breaks are meant (stack traces, payloads): each
// line is made safe on its own and the lines are kept, each prefixed with indent.
func displayLines(w io.Writer, indent, s string) {
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintln(w, indent+display(strings.TrimSuffix(line, "\r")))
	}
}

// enumName is an enum value's name without its type prefix ("DEAD" for JOB_STATE_DEAD), or "-"
// for the unspecified zero value.
func enumName(e protoreflect.Enum) string {
	if e.Number() == 0 {
		return "-"
	}
	full := string(e.Descriptor().Values().ByNumber(e.Number()).Name())
	if full == "" {
		return fmt.Sprintf("%d", e.Number())
	}
	zero := string(e.Descriptor().Values().ByNumber(0).Name())
	prefix := strings.TrimSuffix(zero, "UNSPECIFIED")
	return strings.TrimPrefix(full, prefix)
}

// fmtTime shows a timestamp in UTC, RFC 3339, or "-" when unset.
func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// fmtDuration shows a duration, or "-" when unset.
func fmtDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return roundDuration(d.AsDuration())
}

// roundDuration shows d to a precision a person reads: whole seconds from a minute up (6m39s,
// not 6m38.985177068s), hundredths of a second from a second, and so on down; trailing zero
// units are dropped (1m, not 1m0s).
func roundDuration(d time.Duration) string {
	a := d.Abs()
	switch {
	case a >= time.Minute:
		d = d.Round(time.Second)
	case a >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case a >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	case a >= time.Microsecond:
		d = d.Round(10 * time.Nanosecond)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// orDash shows "-" for an empty cell so columns stay readable.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine flattens s onto one line and cuts it to at most n runes, for table cells; what is
// left is made safe to print with display.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return display(s)
}

// sortedKeys returns a map's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// count spells n things of a kind in English: "1 job", "3 jobs", "0 jobs". The kind's last word
// takes the plural; every kind the commands count takes a plain "s".
func count[N ~int | ~int32 | ~int64](n N, kind string) string {
	if n == 1 {
		return "1 " + kind
	}
	return fmt.Sprintf("%d %ss", n, kind)
}

// anyIfEmpty shows an empty filter (a rule's type or queue) as "any".
func anyIfEmpty(s string) string {
	if s == "" {
		return "any"
	}
	return display(s)
}
