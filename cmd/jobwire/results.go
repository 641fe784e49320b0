package main

import (
	"fmt"
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
