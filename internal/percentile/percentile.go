// Package percentile reads percentiles off sorted samples, the one definition the benchmark and
// the soak test report with, so their p50 and p99 mean the same thing.
package percentile

import "cmp"

// NearestRank returns the nearest-rank p-th percentile (0 < p <= 100) of sorted, which must be
// sorted ascending and not empty: the smallest sample that at least p percent of the samples
// are less than or equal to.
func NearestRank[T cmp.Ordered](sorted []T, p float64) T {
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
