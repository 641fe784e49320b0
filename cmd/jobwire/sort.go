package main

import (
	"flag"
	"slices"
	"strings"

	jwbroker "github.com/jobwire/jobwire/broker"
)

// sortFlags are a listing's --sort and --asc: the broker sorts and pages, so a page token
// continues the same sort.
type sortFlags struct {
	by      string
	asc     bool
	allowed []jwbroker.SortColumn
}

func addSortFlags(fs *flag.FlagSet, allowed []jwbroker.SortColumn) *sortFlags {
	sf := &sortFlags{allowed: allowed}
	fs.StringVar(&sf.by, "sort", "", "sort by this column: "+sf.names()+" (default "+string(allowed[0])+"), largest first")
	fs.BoolVar(&sf.asc, "asc", false, "sort from the smallest value up (oldest first) instead")
	return sf
}

func (sf *sortFlags) names() string {
	names := make([]string, len(sf.allowed))
	for i, c := range sf.allowed {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// build returns the request's sort and ascending fields.
func (sf *sortFlags) build() (string, bool, error) {
	if sf.by != "" && !slices.Contains(sf.allowed, jwbroker.SortColumn(sf.by)) {
		return "", false, usageErrorf("--sort %q is not a column of this list; use one of %s", sf.by, sf.names())
	}
	return sf.by, sf.asc, nil
}
