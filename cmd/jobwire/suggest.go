package main

import (
	"flag"
	"strings"

	"github.com/jobwire/jobwire/internal/editdist"
)

// suggest returns the candidate closest to typed, or "" when none is close enough to be what was
// meant: at most one edit for names of up to four characters, two for longer ones, so "stast"
// suggests "stats" while "frobnicate" suggests nothing. A candidate that typed is a prefix of
// ("que" for "queues") counts as close.
func suggest(typed string, candidates []string) string {
	best, bestDist := "", -1
	for _, c := range candidates {
		d := editdist.Distance(typed, c)
		if len(typed) >= 3 && strings.HasPrefix(c, typed) {
			d = min(d, 1)
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len(typed) <= 4 {
		limit = 1
	}
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// didYouMean is the end of an error sentence about an unknown name: `; did you mean "x"?` when a
// candidate is close, else "".
func didYouMean(typed string, candidates []string) string {
	if s := suggest(typed, candidates); s != "" {
		return "; did you mean " + quoteName(s) + "?"
	}
	return ""
}

func quoteName(s string) string { return `"` + s + `"` }

// topLevelNames lists the first words of the commands: "serve", "dlq", ...
func topLevelNames() []string {
	var names []string
	seen := map[string]bool{}
	for _, c := range commands {
		first, _, _ := strings.Cut(c.name, " ")
		if !seen[first] {
			seen[first] = true
			names = append(names, first)
		}
	}
	return names
}

// flagNames lists a flag set's flags in the --name form.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	return names
}
