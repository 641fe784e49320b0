package store

import (
	"slices"
	"sync"
)

// KnownQueues remembers which queues have a row, so a store's enqueues skip the upsert that
// creates one. Queue rows are never deleted, so what it holds stays true. The zero value is
// empty and ready to use; it is safe for concurrent use.
type KnownQueues struct {
	mu sync.Mutex
	m  map[string]bool
}

// Known reports whether name has a row.
func (q *KnownQueues) Known(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.m[name]
}

// Add records that names have rows; a store calls it once the transaction that created them
// has committed.
func (q *KnownQueues) Add(names []string) {
	if len(names) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = make(map[string]bool, len(names))
	}
	for _, n := range names {
		q.m[n] = true
	}
}

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
