// Package dispatchrule holds the rules for what may be dispatched, in one place: a job may go to
// a worker only once its run time has come, while its queue is neither paused nor at its cap,
// while its concurrency key has a free slot (keyconc.go), while its type's breaker lets it
// through, while the rate limits that count it have allowance, and to a worker that serves its
// type and queue and
// has a free slot.
//
// The rules are pure functions of a state the caller reads (Check and its steps): the broker's
// dispatcher builds its rounds from the steps and explains a waiting job with Check, and the
// stores' lease and offer statements, which repeat the rules in SQL, are checked against Check by
// a property test over random states (store/storetest).
package dispatchrule

import (
	"fmt"
	"slices"
	"time"

	"github.com/jobwire/jobwire/ratelimit"
)

// Reason is why a job may not be dispatched now, in the order the rules apply; None when it
// may.
type Reason int

const (
	// None: the job may be dispatched now.
	None Reason = iota
	// Scheduled: its run time has not come.
	Scheduled
	// QueuePaused: its queue is paused.
	QueuePaused
	// QueueAtCap: its queue holds as many leases as its cap allows.
	QueueAtCap
	// BreakerOpen: its type's breaker is OPEN.
	BreakerOpen
	// BreakerProbing: its type's breaker is HALF_OPEN with every probe slot taken.
	BreakerProbing
	// NoWorker: no worker serves its type and queue.
	NoWorker
	// WorkerSlot: every worker that serves it is busy.
	WorkerSlot
	// KeyAtLimit: its concurrency key has as many jobs leased or running as its limit allows.
	// It is checked after the queue's rules and before the breaker's (Check); numbered last so
	// that the reasons' numbers stay as they were.
	KeyAtLimit
	// RateLimited: a rate limit that counts all its jobs together has no allowance left now
	// (checked after the breaker, before the workers: see RateReason).
	RateLimited
	// RateLimitedKey: a rate limit that counts each key apart has no allowance left for its
	// key now.
	RateLimitedKey
)

var reasonNames = [...]string{"none", "scheduled", "queue_paused", "queue_at_cap", "breaker_open",
	"breaker_probing", "no_worker", "worker_slot", "key_at_limit", "rate_limited", "rate_limited_key"}

func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Job is what the rules read of a job that waits (PENDING or SCHEDULED).
type Job struct {
	Type, Queue string
	RunAt       time.Time
	// Key is the job's concurrency key; "" for none (KeyReason).
	Key string
}

// Queue is the state of a job's queue.
type Queue struct {
	Paused bool
	// Cap is how many of the queue's jobs may be leased or running at once; 0: no cap.
	Cap int
	// Held is how many of its jobs are leased or running now.
	Held int
}

// Room is how many more of the queue's jobs may be leased now: -1 for no cap.
func (q Queue) Room() int {
	if q.Cap == 0 {
		return -1
	}
	return max(0, q.Cap-q.Held)
}

// BreakerState is the state of a type's breaker as dispatch sees it.
type BreakerState int

const (
	// Closed lets every job through.
	Closed BreakerState = iota
	// Open lets nothing through until its next probe is due.
	Open
	// HalfOpen lets Breaker.ProbeRoom probes through.
	HalfOpen
)

// Breaker is the state of a job type's breaker.
type Breaker struct {
	State BreakerState
	// ProbeRoom is how many more probes a HALF_OPEN breaker lets through now.
	ProbeRoom int
}

// Worker is a worker stream that may take jobs.
type Worker struct {
	Types []string
	// Queues are the queues it serves; none: every queue.
	Queues []string
	// Free is how many more jobs it may be handed now.
	Free int
	// Closed marks a stream that takes no work: draining, closed, or not reading its stream.
	Closed bool
}

// Serves reports whether w takes jobs of type typ in queue, free slot or not.
func (w Worker) Serves(typ, queue string) bool {
	return !w.Closed && slices.Contains(w.Types, typ) && w.ServesQueue(queue)
}

// ServesQueue reports whether w takes jobs of queue.
func (w Worker) ServesQueue(queue string) bool {
	return len(w.Queues) == 0 || slices.Contains(w.Queues, queue)
}

// State is what the rules read besides the job: the moment, the job's queue and type's
// breaker, and the workers it may go to.
type State struct {
	Now     time.Time
	Queue   Queue
	Key     Key
	Breaker Breaker
	// Rate is the rate limits' hold on the job now: nil when every limit that counts it has
	// allowance (ratelimit.Gate.Check).
	Rate *ratelimit.Hold
	// RateCounted: some rate limit counts the job, with allowance or not.
	RateCounted bool
	Workers     []Worker
}

// Check answers whether j may be dispatched in state s (None), and if not, the first rule that
// holds it back.
func Check(j Job, s State) Reason {
	if !Ready(j, s.Now) {
		return Scheduled
	}
	if r := QueueReason(s.Queue); r != None {
		return r
	}
	if r := KeyReason(j, s.Key); r != None {
		return r
	}
	if r := BreakerReason(s.Breaker); r != None {
		return r
	}
	if r := RateReason(s.Rate); r != None {
		return r
	}
	return WorkerReason(j, s.Workers)
}

// Ready reports whether j's run time has come by now.
func Ready(j Job, now time.Time) bool { return !j.RunAt.After(now) }

// QueueReason is QueuePaused or QueueAtCap when q holds its jobs back, else None.
func QueueReason(q Queue) Reason {
	switch {
	case q.Paused:
		return QueuePaused
	case q.Cap > 0 && q.Held >= q.Cap:
		return QueueAtCap
	}
	return None
}

// BreakerReason is BreakerOpen or BreakerProbing when b lets no job of its type through now,
// else None: a CLOSED breaker lets every job through, a HALF_OPEN one its probe room.
func BreakerReason(b Breaker) Reason {
	switch {
	case b.State == Closed:
		return None
	case b.State == HalfOpen && b.ProbeRoom > 0:
		return None
	case b.State == Open:
		return BreakerOpen
	}
	return BreakerProbing
}

// RateReason is RateLimited or RateLimitedKey when h, a rate limit's hold on a job, keeps it
// back, else None. Dispatch takes a job's allowance only as it leases it, so a job a rate limit
// holds back spends no attempt: it stays PENDING until its bucket lets it through.
func RateReason(h *ratelimit.Hold) Reason {
	switch {
	case h == nil:
		return None
	case h.Rule.Key != "":
		return RateLimitedKey
	}
	return RateLimited
}

// WorkerReason is None when a worker serves j with a free slot, WorkerSlot when those that
// serve it are busy, NoWorker when none serves it.
func WorkerReason(j Job, ws []Worker) Reason {
	r := NoWorker
	for _, w := range ws {
		if !w.Serves(j.Type, j.Queue) {
			continue
		}
		if w.Free > 0 {
			return None
		}
		r = WorkerSlot
	}
	return r
}

// MayOffer reports whether a job may be leased by the write that stores it, to a worker the
// caller picked (store.Tx.JobInsertOfferedAtCommit): it must be dispatchable now, but more
// strictly than a round leases: it must have no concurrency key and its queue no cap (an offer
// counts no room), its type's breaker must be CLOSED (an offer takes no probe slot), no rate
// limit may count it (an offer takes no allowance), and it must go ahead of no job
// that waits (waitingAhead: a ready job, stored before, of at least its priority).
func MayOffer(j Job, s State, waitingAhead bool) bool {
	return !waitingAhead && j.Key == "" && s.Queue.Cap == 0 && !s.RateCounted && s.Breaker.State == Closed && Check(j, s) == None
}
