package store

import "slices"

// WithoutRoom returns exclude with every queue of room that has no room left added (in name
// order), so a lease enforcing the queues' caps does not read those queues' jobs only to pass
// them over. exclude itself is not changed.
func WithoutRoom(exclude []string, room map[string]int) []string {
	out := exclude
	for name, n := range room {
		if n > 0 {
			continue
		}
		if len(out) == len(exclude) {
			out = slices.Clone(exclude)
		}
		out = append(out, name)
	}
	slices.Sort(out[len(exclude):])
	return out
}
