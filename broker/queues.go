package broker

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobwire/jobwire/store"
)

// queueRule is what dispatch must respect for one queue. The broker keeps the rules of every
// paused or capped queue in memory (loaded at Start, changed only by the calls below).
//
// A round's cost must not grow with the number of paused queues, which anyone allowed to pause
// a queue can make large: a worker serving every queue leaves paused ones out through a join on
// the queues table (JobLeaseParams.ExcludePaused), not a list of names, and a worker naming its
// queues has them checked one lookup each. Capped queues are listed by name when full, so their
// number is bounded (MaxCappedQueues).
type queueRule struct {
	paused bool
	limit  int // 0: no cap
}

// MaxCappedQueues is how many queues may have a concurrency cap at once. A round lists the
// capped queues that are full by name in its lease statement, so their number must stay small.
const MaxCappedQueues = 1000

// ErrTooManyCappedQueues refuses a cap on one more queue past MaxCappedQueues.
var ErrTooManyCappedQueues = fmt.Errorf("at most %d queues may have a concurrency limit; remove one first", MaxCappedQueues)

// loadQueueRules reads the queues' settings before the first dispatch.
func (b *Broker) loadQueueRules(ctx context.Context) error {
	recs, err := b.st.QueueLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load queues: %w", err)
	}
	b.mu.Lock()
	b.queueRules = make(map[string]queueRule)
	b.cappedQueues = make(map[string]bool)
	b.pausedQueues = 0
	for _, r := range recs {
		b.setQueueRuleLocked(r.Name, queueRule{paused: r.Paused, limit: r.ConcurrencyLimit})
	}
	b.mu.Unlock()
	return nil
}

// setQueueRuleLocked records a queue's rule, dropping queues with nothing to enforce, and keeps
// the count of paused queues and the set of capped ones.
func (b *Broker) setQueueRuleLocked(name string, r queueRule) {
	if b.queueRules[name].paused {
		b.pausedQueues--
	}
	if r.paused {
		b.pausedQueues++
	}
	if r.limit > 0 {
		b.cappedQueues[name] = true
	} else {
		delete(b.cappedQueues, name)
	}
	if r.paused || r.limit > 0 {
		b.queueRules[name] = r
		return
	}
	delete(b.queueRules, name)
}

// PauseQueue stops dispatch from a queue, creating the queue if it is new (so a queue can be
// paused before its first job). Jobs already handed to workers finish; nothing is assigned
// from the queue once the call returns.
func (b *Broker) PauseQueue(ctx context.Context, name string) error {
	return b.changeQueue(ctx, name, func(tx store.Tx) error { return tx.QueueSetPaused(name, true) },
		func(r *queueRule) { r.paused = true }, false)
}

// ResumeQueue restarts dispatch from a queue. A queue that does not exist is store.ErrNotFound
// (only pausing creates one).
func (b *Broker) ResumeQueue(ctx context.Context, name string) error {
	return b.changeQueue(ctx, name, func(tx store.Tx) error { return tx.QueueSetPaused(name, false) },
		func(r *queueRule) { r.paused = false }, true)
}

// SetQueueLimit caps how many of a queue's jobs are leased or running at once, across all
// workers; 0 removes the cap. Lowering the cap below what runs now stops new dispatch until
// enough jobs finish; nothing running is interrupted. A queue that does not exist is
// store.ErrNotFound: to cap a queue before its first job, pause it, set the limit, resume it.
func (b *Broker) SetQueueLimit(ctx context.Context, name string, limit int) error {
	if limit < 0 {
		return fmt.Errorf("queue limit must not be negative, got %d", limit)
	}
	b.mu.Lock()
	full := limit > 0 && !b.cappedQueues[name] && len(b.cappedQueues) >= MaxCappedQueues
	b.mu.Unlock()
	if full {
		return ErrTooManyCappedQueues
	}
	return b.changeQueue(ctx, name, func(tx store.Tx) error { return tx.QueueSetLimit(name, limit) },
		func(r *queueRule) { r.limit = limit }, true)
}

// changeQueue stores a queue change, then applies it to the in-memory rules and, if it may let
// through what was held back (wake), asks for a dispatch round. A pause never does: a flood of
// pauses then costs no dispatch rounds.
func (b *Broker) changeQueue(ctx context.Context, name string, write func(store.Tx) error, apply func(*queueRule), wake bool) error {
	if err := b.do(ctx, "queue_change", write); err != nil {
		return err
	}
	b.mu.Lock()
	r := b.queueRules[name]
	apply(&r)
	b.setQueueRuleLocked(name, r)
	b.mu.Unlock()
	if wake {
		b.signal()
	}
	return nil
}

// ListQueues reads every queue (name "") or one, with its depth and oldest ready job.
func (b *Broker) ListQueues(ctx context.Context, name string) ([]QueueStats, error) {
	qs, err := b.st.QueueStats(ctx, name)
	if err != nil {
		return nil, err
	}
	return queueStatsOf(qs), nil
}

// heldByQueueLocked counts the leases (LEASED and RUNNING jobs) held per capped queue.
func (b *Broker) heldByQueueLocked() map[string]int {
	held := make(map[string]int)
	if len(b.cappedQueues) == 0 {
		return held
	}
	for _, l := range b.leases {
		if b.cappedQueues[l.job.Queue] {
			held[l.job.Queue]++
		}
	}
	return held
}

// queuePlan is what one dispatch round may lease per queue.
type queuePlan struct {
	rules     map[string]queueRule // every paused or capped queue (the broker's, read under b.mu)
	anyPaused bool
	capped    []string       // leased only while room lasts
	room      map[string]int // capped queue: how many more may be held now
}

// paused reports whether q is paused.
func (p queuePlan) paused(q string) bool { return p.rules[q].paused }

// planQueuesLocked reads the rules and held leases into a plan for one round. It visits the
// capped queues only: paused ones are looked up by name as needed.
func (b *Broker) planQueuesLocked() queuePlan {
	p := queuePlan{rules: b.queueRules, anyPaused: b.pausedQueues > 0, room: make(map[string]int)}
	if len(b.cappedQueues) == 0 {
		return p
	}
	held := b.heldByQueueLocked()
	for name := range b.cappedQueues {
		if r := b.queueRules[name]; !r.paused {
			p.capped = append(p.capped, name)
			p.room[name] = max(0, r.limit-held[name])
		}
	}
	slices.Sort(p.capped)
	return p
}

// mayHandOutLocked reports whether a job of queue may go to a worker now, given the leases
// already held (held counts per capped queue and is updated by the caller). It catches a
// pause or a lower cap that landed between leasing and handing out.
func (b *Broker) mayHandOutLocked(queue string, held map[string]int) bool {
	r, ok := b.queueRules[queue]
	if !ok {
		return true
	}
	if r.paused {
		return false
	}
	return r.limit == 0 || held[queue] < r.limit
}
