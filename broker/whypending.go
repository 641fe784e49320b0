package broker

import (
	"fmt"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/job"
)

// WaitReason is why a job that has not finished is not running yet.
type WaitReason int

// The reasons are the dispatch rules' (dispatchrule.Reason), in the order the rules apply.
const (
	// WaitNone: the job is leased, running or finished: it waits for nothing.
	WaitNone = WaitReason(dispatchrule.None)
	// WaitScheduled: its run time has not come (Waiting.Until).
	WaitScheduled = WaitReason(dispatchrule.Scheduled)
	// WaitQueuePaused: its queue is paused.
	WaitQueuePaused = WaitReason(dispatchrule.QueuePaused)
	// WaitQueueAtCap: its queue holds as many leases as its cap (Waiting.Limit) allows.
	WaitQueueAtCap = WaitReason(dispatchrule.QueueAtCap)
	// WaitBreakerOpen: its type's breaker is OPEN; the first probe may go at Waiting.Until.
	WaitBreakerOpen = WaitReason(dispatchrule.BreakerOpen)
	// WaitBreakerProbing: its type's breaker is HALF_OPEN with every probe slot taken.
	WaitBreakerProbing = WaitReason(dispatchrule.BreakerProbing)
	// WaitNoWorker: no worker connected to this broker serves its type and queue.
	WaitNoWorker = WaitReason(dispatchrule.NoWorker)
	// WaitWorkerSlot: it is ready and waits for a free slot of a worker that serves it.
	WaitWorkerSlot = WaitReason(dispatchrule.WorkerSlot)
	// WaitKeyAtLimit: its concurrency key has as many jobs running as its limit allows.
	WaitKeyAtLimit = WaitReason(dispatchrule.KeyAtLimit)
	// WaitRateLimited: a rate limit (its rate in Waiting.Limit) has no allowance left until
	// Waiting.Until.
	WaitRateLimited = WaitReason(dispatchrule.RateLimited)
	// WaitRateLimitedKey: a rate limit counting each key apart has no allowance left for the
	// job's key until Waiting.Until.
	WaitRateLimitedKey = WaitReason(dispatchrule.RateLimitedKey)
)

var waitReasonNames = [...]string{"", "scheduled", "queue_paused", "queue_at_cap", "breaker_open",
	"breaker_probing", "no_worker", "worker_slot", "rate_limited", "rate_limited_key"}

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
	// Until is when the wait ends by itself: the run time, the breaker's next probe, or the
	// moment a rate limit's bucket lets the job through.
	Until time.Time
	// Limit is the queue's cap for WaitQueueAtCap, the key's limit for WaitKeyAtLimit, the
	// limit's rate for the rate reasons.
	Limit int
}

// WhyPending explains why j, read just before, is not running, with the dispatcher's own rules
// (dispatchrule.Check) in the order a round applies them: the run time, the queue's pause and
// cap (the round's queue plan), the type's breaker (the allowance the round asks for), then the
// workers the round would offer it to. A job the rules let through waits for the round that
// takes it: for a worker's slot. The answer is of this moment and this broker: in a cluster
// another broker's workers may serve the job.
func (b *Broker) WhyPending(j *job.Job) Waiting {
	switch j.State {
	case job.StateScheduled, job.StatePending:
	default:
		return Waiting{}
	}
	now := b.now()
	if j.State == job.StateScheduled || !dispatchrule.Ready(dispatchrule.Job{RunAt: j.RunAt}, now) {
		return Waiting{Reason: WaitScheduled, Until: j.RunAt,
			Detail: "scheduled for " + j.RunAt.UTC().Format(time.RFC3339)}
	}
	if w, held := b.keyWaiting(j); held {
		return w
	}
	hold := b.rateHold(b.ctx, j)
	b.mu.Lock()
	defer b.mu.Unlock()
	st := dispatchrule.State{Now: now, Queue: b.planQueuesLocked().queue(j.Queue),
		Breaker: b.breakerStateLocked(j.Type, true), Rate: hold, Workers: b.workersLocked()}
	r := dispatchrule.Check(dispatchrule.Job{Type: j.Type, Queue: j.Queue, RunAt: j.RunAt}, st)
	return b.waiting(j, r, st)
}

// waiting words reason r, which holds j back in state st, for a person.
func (b *Broker) waiting(j *job.Job, r dispatchrule.Reason, st dispatchrule.State) Waiting {
	switch r {
	case dispatchrule.QueuePaused:
		return Waiting{Reason: WaitQueuePaused, Detail: fmt.Sprintf("queue %q is paused", j.Queue)}
	case dispatchrule.QueueAtCap:
		limit := st.Queue.Cap
		return Waiting{Reason: WaitQueueAtCap, Limit: limit,
			Detail: fmt.Sprintf("queue %q is at its cap of %d running jobs", j.Queue, limit)}
	case dispatchrule.BreakerOpen, dispatchrule.BreakerProbing:
		info, _ := b.breakers.Info(j.Type)
		if r == dispatchrule.BreakerOpen {
			return Waiting{Reason: WaitBreakerOpen, Until: info.NextProbeAt,
				Detail: fmt.Sprintf("the breaker of %q is OPEN until %s", j.Type, info.NextProbeAt.UTC().Format(time.RFC3339))}
		}
		return Waiting{Reason: WaitBreakerProbing, Until: info.NextProbeAt,
			Detail: fmt.Sprintf("the breaker of %q is HALF_OPEN and its %d probe(s) are running", j.Type, info.ProbesInFlight)}
	case dispatchrule.RateLimited, dispatchrule.RateLimitedKey:
		return rateWaiting(r, st.Rate)
	case dispatchrule.NoWorker:
		return Waiting{Reason: WaitNoWorker,
			Detail: fmt.Sprintf("no worker connected to this broker serves type %q on queue %q", j.Type, j.Queue)}
	}
	return Waiting{Reason: WaitWorkerSlot,
		Detail: "ready, waiting for a free slot of a worker that serves it"}
}

// breakerStateLocked is the state of typ's breaker as dispatch sees it. Without withInfo an
// allowance of 0 reads as OPEN: the planner needs no more than that nothing goes through.
func (b *Broker) breakerStateLocked(typ string, withInfo bool) dispatchrule.Breaker {
	a := breaker.Unlimited
	if b.breakers != nil {
		a = b.breakers.Allowance(typ)
	}
	switch {
	case a == breaker.Unlimited:
		return dispatchrule.Breaker{State: dispatchrule.Closed}
	case a > 0:
		return dispatchrule.Breaker{State: dispatchrule.HalfOpen, ProbeRoom: a}
	}
	if withInfo {
		if info, _ := b.breakers.Info(typ); info.State != breaker.StateOpen {
			return dispatchrule.Breaker{State: dispatchrule.HalfOpen}
		}
	}
	return dispatchrule.Breaker{State: dispatchrule.Open}
}

// workersLocked is the broker's worker streams as the dispatch rules see them.
func (b *Broker) workersLocked() []dispatchrule.Worker {
	ws := make([]dispatchrule.Worker, len(b.table.sessions))
	for i, s := range b.table.sessions {
		ws[i] = s.asWorkerLocked(0)
	}
	return ws
}

// asWorkerLocked is s as the dispatch rules see it, with freed more slots than it has free now.
func (s *Session) asWorkerLocked(freed int) dispatchrule.Worker {
	return dispatchrule.Worker{Types: s.types, Queues: s.queues, Free: s.freeLocked() + freed,
		Closed: !s.takesWorkLocked()}
}
