package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// progressLine is a job's progress in one line: "40% copying part 2 of 5 (attempt 1, 12:00:01)".
func progressLine(p *jobwirev1.JobProgress) string {
	var parts []string
	if p.Fraction != nil {
		parts = append(parts, fmt.Sprintf("%.0f%%", p.GetFraction()*100))
	}
	if p.GetMessage() != "" {
		parts = append(parts, oneLine(p.GetMessage(), 200))
	}
	return fmt.Sprintf("%s (attempt %d, %s)", strings.Join(parts, " "), p.GetAttempt(), fmtTime(p.GetUpdatedAt()))
}

// printResult shows a succeeded job's result in full, as printPayload shows a payload.
func printResult(w io.Writer, r []byte) {
	if len(r) == 0 {
		fmt.Fprintln(w, "\nResult: none")
		return
	}
	kind := "JSON"
	if !json.Valid(r) {
		kind = "not JSON"
	}
	fmt.Fprintf(w, "\nResult (%d bytes, %s):\n", len(r), kind)
	displayLines(w, "", string(r))
}
