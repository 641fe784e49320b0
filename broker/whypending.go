package broker

import (
	"fmt"
	"slices"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
)

// WaitReason is why a job that has not finished is not running yet.
type WaitReason int

const (
	// WaitNone: the job is leased, running or finished: it waits for nothing.
	WaitNone WaitReason = iota
	// WaitScheduled: its run time has not come (Waiting.Until).
	WaitScheduled
	// WaitQueuePaused: its queue is paused.
	WaitQueuePaused
	// WaitQueueAtCap: its queue holds as many leases as its cap (Waiting.Limit) allows.
	WaitQueueAtCap
	// WaitBreakerOpen: its type's breaker is OPEN; the first probe may go at Waiting.Until.
	WaitBreakerOpen
	// WaitBreakerProbing: its type's breaker is HALF_OPEN with every probe slot taken.
	WaitBreakerProbing
	// WaitNoWorker: no worker connected to this broker serves its type and queue.
	WaitNoWorker
	// WaitWorkerSlot: it is ready and waits for a free slot of a worker that serves it.
	WaitWorkerSlot
)

var waitReasonNames = [...]string{"", "scheduled", "queue_paused", "queue_at_cap", "breaker_open",
	"breaker_probing", "no_worker", "worker_slot"}

func (r WaitReason) String() string {
	if int(r) < len(waitReasonNames) {
		return waitReasonNames[r]
	}
	return fmt.Sprintf("WaitReason(%d)", int(r))
}

// Waiting says why a job is not running, for a person: Reason, with Detail a sentence.
type Waiting struct {
	Reason WaitReason
	Detail string
	// Until is when the wait ends by itself: the run time, or the breaker's next probe.
	Until time.Time
	// Limit is the queue's cap for WaitQueueAtCap.
	Limit int
}

// WhyPending explains why j, read just before, is not running, with the dispatcher's own rules
// in the order a round applies them: the run time, the queue's pause and cap (the round's
// queue plan), the type's breaker (the allowance the round asks for), then the workers the
// round would offer it to. The answer is of this moment and this broker: in a cluster another
// broker's workers may serve the job.
func (b *Broker) WhyPending(j *job.Job) Waiting {
	now := b.now()
	switch {
	case j.State == job.StateScheduled || (j.State == job.StatePending && j.RunAt.After(now)):
		return Waiting{Reason: WaitScheduled, Until: j.RunAt,
			Detail: "scheduled for " + j.RunAt.UTC().Format(time.RFC3339)}
	case j.State != job.StatePending:
		return Waiting{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	plan := b.planQueuesLocked()
	if plan.paused(j.Queue) {
		return Waiting{Reason: WaitQueuePaused, Detail: fmt.Sprintf("queue %q is paused", j.Queue)}
	}
	if plan.full(j.Queue) {
		limit := plan.rules[j.Queue].limit
		return Waiting{Reason: WaitQueueAtCap, Limit: limit,
			Detail: fmt.Sprintf("queue %q is at its cap of %d running jobs", j.Queue, limit)}
	}
	if b.breakers != nil && b.breakers.Allowance(j.Type) == 0 {
		info, _ := b.breakers.Info(j.Type)
		if info.State == breaker.StateOpen {
			return Waiting{Reason: WaitBreakerOpen, Until: info.NextProbeAt,
				Detail: fmt.Sprintf("the breaker of %q is OPEN until %s", j.Type, info.NextProbeAt.UTC().Format(time.RFC3339))}
		}
		return Waiting{Reason: WaitBreakerProbing, Until: info.NextProbeAt,
			Detail: fmt.Sprintf("the breaker of %q is HALF_OPEN and its %d probe(s) are running", j.Type, info.ProbesInFlight)}
	}
	for _, s := range b.table.sessions {
		if s.takesWorkLocked() && slices.Contains(s.types, j.Type) && s.serves(j.Queue) {
			return Waiting{Reason: WaitWorkerSlot,
				Detail: "ready, waiting for a free slot of a worker that serves it"}
		}
	}
	return Waiting{Reason: WaitNoWorker,
		Detail: fmt.Sprintf("no worker connected to this broker serves type %q on queue %q", j.Type, j.Queue)}
}
