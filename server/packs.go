package server

import "iter"

// packs cuts items, in order, into runs of at most maxN items and at most maxBytes of their
// sizes together: an item that would take a run past maxBytes starts the next one, and an item
// larger than maxBytes makes a run of its own. It is how a worker's batch frames (frames) and a
// watch's responses (watchParts) stay within what the other end reads in one message, gRPC's
// default of 4 MiB, whatever the jobs ready together carry.
func packs[T any](items []T, maxN, maxBytes int, size func(T) int) iter.Seq[[]T] {
	return func(yield func([]T) bool) {
		start, total := 0, 0
		for i, it := range items {
			n := size(it)
			if i > start && (i-start == maxN || total+n > maxBytes) {
				if !yield(items[start:i]) {
					return
				}
				start, total = i, 0
			}
			total += n
		}
		if start < len(items) {
			yield(items[start:])
		}
	}
}
