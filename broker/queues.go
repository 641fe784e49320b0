package broker

import (
	"context"
	"fmt"

	"github.com/jobwire/jobwire/store"
)

// queueRule is what dispatch must respect for one queue. The broker keeps the rules of every
// paused or capped queue in memory (loaded at Start, changed only by the calls below), so a
// dispatch round never reads the queues table.
type queueRule struct {
	paused bool
	limit  int // 0: no cap
}

// loadQueueRules reads the queues' settings before the first dispatch.
func (b *Broker) loadQueueRules(ctx context.Context) error {
	recs, err := b.st.QueueLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load queues: %w", err)
	}
	rules := make(map[string]queueRule)
	for _, r := range recs {
		if r.Paused || r.ConcurrencyLimit > 0 {
			rules[r.Name] = queueRule{paused: r.Paused, limit: r.ConcurrencyLimit}
		}
	}
	b.mu.Lock()
	b.queueRules = rules
	b.mu.Unlock()
	return nil
}

// setQueueRuleLocked records a queue's rule, dropping queues with nothing to enforce.
func (b *Broker) setQueueRuleLocked(name string, r queueRule) {
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
		func(r *queueRule) { r.paused = true })
}

// ResumeQueue restarts dispatch from a queue. A queue that does not exist is store.ErrNotFound
// (only pausing creates one).
func (b *Broker) ResumeQueue(ctx context.Context, name string) error {
	return b.changeQueue(ctx, name, func(tx store.Tx) error { return tx.QueueSetPaused(name, false) },
		func(r *queueRule) { r.paused = false })
}

// SetQueueLimit caps how many of a queue's jobs are leased or running at once, across all
// workers; 0 removes the cap. Lowering the cap below what runs now stops new dispatch until
// enough jobs finish; nothing running is interrupted. A queue that does not exist is
// store.ErrNotFound: to cap a queue before its first job, pause it, set the limit, resume it.
func (b *Broker) SetQueueLimit(ctx context.Context, name string, limit int) error {
	if limit < 0 {
		return fmt.Errorf("queue limit must not be negative, got %d", limit)
	}
	return b.changeQueue(ctx, name, func(tx store.Tx) error { return tx.QueueSetLimit(name, limit) },
		func(r *queueRule) { r.limit = limit })
}

// changeQueue stores a queue change, then applies it to the in-memory rules and wakes the
// writer for a dispatch round, which may now lease what it held back.
func (b *Broker) changeQueue(ctx context.Context, name string, write func(store.Tx) error, apply func(*queueRule)) error {
	if err := b.do(ctx, "queue_change", write); err != nil {
		return err
	}
	b.mu.Lock()
	r := b.queueRules[name]
	apply(&r)
	b.setQueueRuleLocked(name, r)
	b.mu.Unlock()
	b.signal()
	return nil
}

// ListQueues reads every queue (name "") or one, with its depth and oldest ready job.
func (b *Broker) ListQueues(ctx context.Context, name string) ([]store.QueueStats, error) {
	return b.st.QueueStats(ctx, name)
}

// heldByQueueLocked counts the leases (LEASED and RUNNING jobs) held per capped queue.
func (b *Broker) heldByQueueLocked() map[string]int {
	held := make(map[string]int)
	capped := false
	for _, r := range b.queueRules {
		if r.limit > 0 {
			capped = true
			break
		}
	}
	if !capped {
		return held
	}
	for _, l := range b.leases {
		if r, ok := b.queueRules[l.job.Queue]; ok && r.limit > 0 {
			held[l.job.Queue]++
		}
	}
	return held
}

// queuePlan is what one dispatch round may lease per queue.
type queuePlan struct {
	paused []string       // never leased from
	capped []string       // leased only while room lasts
	room   map[string]int // capped queue: how many more may be held now
}

// planQueuesLocked reads the rules and held leases into a plan for one round.
func (b *Broker) planQueuesLocked() queuePlan {
	p := queuePlan{room: make(map[string]int)}
	if len(b.queueRules) == 0 {
		return p
	}
	held := b.heldByQueueLocked()
	for name, r := range b.queueRules {
		switch {
		case r.paused:
			p.paused = append(p.paused, name)
		case r.limit > 0:
			p.capped = append(p.capped, name)
			p.room[name] = max(0, r.limit-held[name])
		}
	}
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
