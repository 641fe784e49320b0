package broker

import (
	"time"

	"github.com/jobwire/jobwire/job"
)

// A worker must be able to send a Result again without knowing whether the broker stored it:
// after a stream broke before the answer came, or when it was unsure it sent it. The broker
// answers such a repeat as it answered the first: a repeat that comes while the first is being
// stored gets the same answer once it is known, and a repeat after that gets the same ResultAck
// from recentResults for resultMemory after the first was stored.
const (
	// resultMemory is how long a stored result's ResultAck is kept for repeats. It covers a
	// worker's reconnect backoff (at most 30 s in the libraries) many times over.
	resultMemory = 5 * time.Minute
	// resultMemoryMax bounds what is kept: beyond it the oldest answers are forgotten first
	// (about 20 MB at most).
	resultMemoryMax = 100_000
)

// recentResult is the answer to a stored result.
type recentResult struct {
	ack     ResultAck
	success bool
	at      time.Time
}

// recentResults remembers the answers to the results stored lately, by lease. Guarded by
// Broker.mu.
type recentResults struct {
	m map[job.LeaseRef]recentResult
	// order[head:] are the remembered leases, oldest first. Forgetting moves head; the slice
	// is compacted only once half of it is forgotten, so a result stored on a full memory
	// costs O(1), not a copy of every remembered lease.
	order []job.LeaseRef
	head  int
}

func (r *recentResults) add(ack ResultAck, success bool, now time.Time) {
	if r.m == nil {
		r.m = make(map[job.LeaseRef]recentResult)
	}
	r.prune(now)
	// One probe of the map, not a look for the lease and then a store: with thousands of
	// leases remembered, each probe of a new one is a walk of cold memory.
	n := len(r.m)
	r.m[ack.Ref] = recentResult{ack: ack, success: success, at: now}
	if len(r.m) > n {
		r.order = append(r.order, ack.Ref)
	}
}

// get returns the answer to ref's stored result, if it is still kept.
func (r *recentResults) get(ref job.LeaseRef, now time.Time) (recentResult, bool) {
	res, ok := r.m[ref]
	if !ok || now.Sub(res.at) > resultMemory {
		return recentResult{}, false
	}
	return res, true
}

// live is how many leases are remembered.
func (r *recentResults) live() int { return len(r.order) - r.head }

// prune forgets answers older than resultMemory, and the oldest beyond resultMemoryMax.
func (r *recentResults) prune(now time.Time) {
	for r.head < len(r.order) {
		res := r.m[r.order[r.head]]
		if r.live() < resultMemoryMax && now.Sub(res.at) <= resultMemory {
			break
		}
		delete(r.m, r.order[r.head])
		r.head++
	}
	if r.head > 0 && 2*r.head >= len(r.order) {
		n := copy(r.order, r.order[r.head:])
		r.order, r.head = r.order[:n], 0
	}
}

// repeatedResultLocked answers a result for a lease that is no longer current when it repeats
// one already stored, and reports whether it did.
func (s *Session) repeatedResultLocked(ref job.LeaseRef, success bool) bool {
	res, ok := s.b.table.recent.get(ref, s.b.now())
	if !ok {
		return false
	}
	if res.success != success {
		s.refuse(ref, AboutResult, RefusedStale, "a different result for this lease is already stored")
		return true
	}
	s.out.push(res.ack)
	return true
}

// ending is what a lease being finished is being finished with (endingNone: it is not): a
// repeat of the same is answered as the first is, anything else is refused.
type ending uint8

const (
	endingNone ending = iota
	endingSuccess
	endingFailure
	endingRelease
)

// endingOf is the ending a Result with failure (nil for success) asks for.
func endingOf(failure *job.Failure) ending {
	if failure == nil {
		return endingSuccess
	}
	return endingFailure
}

// differs is the refusal of a Result other than the ending e being stored.
func (e ending) differs() string {
	if e == endingRelease {
		return "the lease is being released: its job never started, so it has no result"
	}
	return "a different result for this lease is already being stored"
}
