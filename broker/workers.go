package broker

import (
	"slices"
	"time"
)

// WorkerInfo is one connected worker stream as the broker sees it now.
type WorkerInfo struct {
	SessionID   string
	WorkerID    string
	Types       []string
	Queues      []string // empty: every queue
	Capacity    int
	Held        int // leases the stream holds (assigned, running or finishing)
	Running     int // of those, the ones whose user code started
	Draining    bool
	ConnectedAt time.Time
}

// Workers lists the connected worker streams in dispatch rotation order.
func (b *Broker) Workers() []WorkerInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]WorkerInfo, 0, len(b.table.sessions))
	for _, s := range b.table.sessions {
		w := WorkerInfo{SessionID: s.id, WorkerID: s.workerID, Types: slices.Clone(s.types),
			Queues: slices.Clone(s.queues), Capacity: s.capacity, Held: len(s.held),
			Draining: s.draining, ConnectedAt: s.since}
		for _, l := range s.held {
			if l.started {
				w.Running++
			}
		}
		out = append(out, w)
	}
	return out
}

// WorkerTotals counts connected streams and their free slots without copying them, for
// metrics scraped often.
func (b *Broker) WorkerTotals() (streams, free int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.table.sessions {
		if n := s.freeLocked(); !s.draining && n > 0 {
			free += n
		}
	}
	return len(b.table.sessions), free
}
