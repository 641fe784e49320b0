package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// printJSON writes m as protobuf JSON: field names in lowerCamelCase, enums by name, 64-bit
// integers as strings, exactly as any other protobuf JSON reader expects.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// newTable starts an aligned table; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprint(w, "\n")
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
	return d.AsDuration().String()
}

// orDash shows "-" for an empty cell so columns stay readable.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine flattens s onto one line and cuts it to at most n runes, for table cells.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
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
