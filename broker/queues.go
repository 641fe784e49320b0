package broker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
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

// queueState holds the rules of every paused or capped queue, under the broker's lock (a round
// reads them with the leases it counts against the caps, in one critical section).
type queueState struct {
	queueRules   map[string]queueRule
	pausedQueues int             // how many of queueRules are paused
	cappedQueues map[string]bool // the capped ones
	// pausedBacklog says the paused queues held a backlog that a lease of every queue would
	// read past at the last count (countPausedBacklog), or a queue was paused since; it holds
	// only while a queue is paused (backlog).
	pausedBacklog bool
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
	b.replaceQueueRulesLocked(recs)
	b.mu.Unlock()
	return nil
}

// replaceQueueRulesLocked makes recs the rules, and reports whether a round may now lease jobs
// that earlier rounds left (see queueState.replace).
func (b *Broker) replaceQueueRulesLocked(recs []store.QueueRecord) (loosened bool) {
	return b.queues.replace(recs)
}

// replace makes recs the rules, and reports whether a round may now lease jobs that earlier
// rounds left: a queue resumed, uncapped or capped higher, or capped for the first time (a
// round that knows of no capped queue leaves the jobs of any queue the database says is capped
// to one that counts its room, JobLeaseParams.SkipCapped).
func (q *queueState) replace(recs []store.QueueRecord) (loosened bool) {
	old := q.queueRules
	q.queueRules = make(map[string]queueRule)
	q.cappedQueues = make(map[string]bool)
	q.pausedQueues = 0
	for _, r := range recs {
		q.set(r.Name, old[r.Name], queueRule{paused: r.Paused, limit: r.ConcurrencyLimit})
	}
	for name, was := range old {
		now := q.queueRules[name]
		if was.paused && !now.paused || was.limit > 0 && (now.limit == 0 || now.limit > was.limit) {
			loosened = true
		}
	}
	for name := range q.cappedQueues {
		if old[name].limit == 0 {
			loosened = true
		}
	}
	return loosened
}

// Several brokers on one database (Options.Cluster) each keep the rules in memory as a cache of
// the queues table, which is the authority: every lease asks the store to enforce pauses and
// caps from the database (JobLeaseParams.EnforceQueues), counting every broker's leases. The
// cache only spares rounds that could lease nothing (a paused queue, a queue this broker alone
// fills). A pause, resume or limit change publishes store.EventQueues; every broker, the one
// that made it included, reads the rules again when it hears of it or of lost events
// (queuesChanged), and one that sees a queue resumed or given more room runs a dispatch round.

// freesRoomLocked reports whether ending a lease of queue makes room that other brokers must
// hear of: in a cluster, a capped queue's jobs may wait on any broker for its room, so the
// write that ends the lease publishes store.EventReady (a result then is not batched with
// others' successes, whose statement publishes nothing).
func (b *Broker) freesRoomLocked(queue string) bool {
	return b.mode.sharedQueues() && b.queues.cappedQueues[queue]
}

// queueReloadRetry is how long a broker waits to read the queues again after a read failed.
const queueReloadRetry = time.Second

// queueReloader reads the queue rules again when they may have changed in the database
// (changed), off the caller's goroutine: the caller may be the cluster's event listener, which
// must not block. Reports that come while one read runs are served by one more read, not one
// each; a read that fails is tried again after queueReloadRetry.
type queueReloader struct {
	service.Base
	clk  clock.Clock
	log  *slog.Logger
	what string                          // what it reads, for the log
	read func(ctx context.Context) error // reads the rules once

	mu      sync.Mutex
	ctx     context.Context
	running bool // a read is under way
	again   bool // a change was reported since it began
}

func newQueueReloader(clk clock.Clock, log *slog.Logger, what string, read func(ctx context.Context) error) *queueReloader {
	return &queueReloader{clk: clk, log: log, what: what, read: read}
}

// Start lets changes be reported; the reads run on ctx.
func (r *queueReloader) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	return r.Base.Start(ctx)
}

// changed reports that queue settings may have changed in the database.
func (r *queueReloader) changed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		r.again = true
		return
	}
	ctx := r.ctx
	r.running = r.Go(func() { r.loop(ctx) })
}

// loop reads the rules until no change was reported during a read.
func (r *queueReloader) loop(ctx context.Context) {
	for {
		if err := r.read(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("read "+r.what+" again", "err", err, "retry_in", queueReloadRetry)
			r.clk.AfterFunc(queueReloadRetry, r.changed)
		}
		r.mu.Lock()
		again := r.again && r.Running()
		r.again, r.running = false, again
		r.mu.Unlock()
		if !again {
			return
		}
	}
}

// busy reports whether a read is under way.
func (r *queueReloader) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// queuesChanged reports that queue settings may have changed in the database: the rules are
// read again (queueReloader), and a dispatch round follows if a queue now lets more through.
func (b *Broker) queuesChanged() { b.svc.queueReload.changed() }

// reloadQueueRules reads the rules into memory once.
func (b *Broker) reloadQueueRules(ctx context.Context) error {
	recs, err := b.st.QueueLoadAll(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	loosened := b.replaceQueueRulesLocked(recs)
	b.mu.Unlock()
	if loosened {
		b.signal()
	}
	// A change of the rate limits is announced as a change of the queues' rules too.
	return b.reloadRateLimits(ctx)
}

// set records a queue's rule, was being the rule the broker knew before, dropping queues with
// nothing to enforce, and keeps the count of paused queues and the set of capped ones. A queue
// newly paused is taken for a backlog until counted.
func (q *queueState) set(name string, was, r queueRule) {
	if q.queueRules[name].paused {
		q.pausedQueues--
	}
	if r.paused {
		q.pausedQueues++
	}
	if r.paused && !was.paused {
		q.pausedBacklog = true
	}
	if r.limit > 0 {
		q.cappedQueues[name] = true
	} else {
		delete(q.cappedQueues, name)
	}
	if r.paused || r.limit > 0 {
		q.queueRules[name] = r
		return
	}
	delete(q.queueRules, name)
}

// backlog reports whether the paused queues may hold a backlog (pausedBacklog).
func (q *queueState) backlog() bool { return q.pausedQueues > 0 && q.pausedBacklog }

// countPausedBacklog counts, every sweep while a queue is paused, whether the paused queues
// hold a backlog (store.PausedBacklogMin ready jobs or more; queueState.backlog). Only
// then does a lease of every queue name the others, and is no job offered: a lease that reads
// every queue, and an offer's check that no job waits ahead, read past the paused ones' ready
// jobs of their types, while a lease that names the others pays a round trip to find them. A
// queue counts as holding a backlog from its pause until counted, and one that fills while
// paused is found at the next count; so is one paused while a count was made, which may have
// missed it. A count that fails, or is not made while the database does not answer, keeps the
// last verdict; one is given a sweep interval, so that a silent database does not hold the
// sweeps back.
func (b *Broker) countPausedBacklog() {
	b.mu.Lock()
	paused := b.queues.pausedQueues > 0
	b.mu.Unlock()
	if !paused || b.Unreachable() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.SweepInterval)
	defer cancel()
	n, err := b.st.PausedReady(ctx, store.PausedBacklogMin)
	if err != nil {
		b.log.Debug("count the paused queues' ready jobs", "err", err)
		return
	}
	b.mu.Lock()
	b.queues.pausedBacklog = n >= store.PausedBacklogMin
	b.mu.Unlock()
}

// PauseQueue stops dispatch from a queue, creating the queue if it is new (so a queue can be
// paused before its first job). Jobs already handed to workers finish; nothing is assigned
// from the queue once the call returns, but in a cluster a lease another broker was storing
// as the pause committed, whose own transaction still saw the queue running.
func (b *Broker) PauseQueue(ctx context.Context, name string) error {
	return b.changeQueue(ctx, name, store.AuditEvent{Action: AuditQueuePause, Target: name},
		func(tx store.Tx) error { return tx.QueueSetPaused(name, true) },
		func(r *queueRule) { r.paused = true }, false)
}

// ResumeQueue restarts dispatch from a queue. A queue that does not exist is store.ErrNotFound
// (only pausing creates one).
func (b *Broker) ResumeQueue(ctx context.Context, name string) error {
	return b.changeQueue(ctx, name, store.AuditEvent{Action: AuditQueueResume, Target: name},
		func(tx store.Tx) error { return tx.QueueSetPaused(name, false) },
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
	full := limit > 0 && !b.queues.cappedQueues[name] && len(b.queues.cappedQueues) >= MaxCappedQueues
	b.mu.Unlock()
	if full {
		return ErrTooManyCappedQueues
	}
	ev := store.AuditEvent{Action: AuditQueueLimit, Target: name, Detail: "limit=" + strconv.Itoa(limit)}
	return b.changeQueue(ctx, name, ev, func(tx store.Tx) error { return tx.QueueSetLimit(name, limit) },
		func(r *queueRule) { r.limit = limit }, true)
}

// changeQueue stores a queue change with its audit event, then applies it to the in-memory
// rules and, if it may let through what was held back (wake), asks for a dispatch round. A
// pause never does: a flood of pauses then costs no dispatch rounds.
func (b *Broker) changeQueue(ctx context.Context, name string, ev store.AuditEvent, write func(store.Tx) error, apply func(*queueRule), wake bool) error {
	// A queue change locks the capped queues: after the batch's breakers (see breakerBatch).
	err := b.storeRuleChange(ctx, ruleChange{op: "queue_change", locks: true, write: write,
		announce: []store.Event{{Kind: store.EventQueues, Key: name}}, audit: ev})
	if err != nil {
		return err
	}
	b.mu.Lock()
	was := b.queues.queueRules[name]
	r := was
	apply(&r)
	b.queues.set(name, was, r)
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
	if len(b.queues.cappedQueues) == 0 {
		return held
	}
	for _, l := range b.table.leases {
		if b.queues.cappedQueues[l.job.Queue] {
			held[l.job.Queue]++
		}
	}
	return held
}

// queuePlan is what one dispatch round may lease per queue.
type queuePlan struct {
	rules     map[string]queueRule // every paused or capped queue (the broker's, read under b.mu)
	anyPaused bool
	held      map[string]int // capped queue: its leases held now
	capped    []string       // leased only while room lasts
	room      map[string]int // capped queue: how many more may be held now
}

// queue is q's state as the dispatch rules see it.
func (p queuePlan) queue(q string) dispatchrule.Queue {
	r := p.rules[q]
	return dispatchrule.Queue{Paused: r.paused, Cap: r.limit, Held: p.held[q]}
}

// paused reports whether q is paused.
func (p queuePlan) paused(q string) bool {
	return dispatchrule.QueueReason(p.queue(q)) == dispatchrule.QueuePaused
}

// full reports whether q is capped and holds as many leases as its cap allows.
func (p queuePlan) full(q string) bool {
	return dispatchrule.QueueReason(p.queue(q)) == dispatchrule.QueueAtCap
}

// planQueuesLocked reads the rules and held leases into a plan for one round. It visits the
// capped queues only: paused ones are looked up by name as needed.
func (b *Broker) planQueuesLocked() queuePlan {
	p := queuePlan{rules: b.queues.queueRules, anyPaused: b.queues.pausedQueues > 0}
	if len(b.queues.cappedQueues) == 0 {
		return p // no room to count: a nil map reads as no capped queue
	}
	p.room = make(map[string]int, len(b.queues.cappedQueues))
	p.held = b.heldByQueueLocked()
	for name := range b.queues.cappedQueues {
		if q := p.queue(name); !q.Paused {
			p.capped = append(p.capped, name)
			p.room[name] = q.Room()
		}
	}
	slices.Sort(p.capped)
	return p
}

// mayHandOutLocked reports whether a job of queue may go to a lone broker's worker now, given
// the leases already held (held counts per capped queue and is updated by the caller). It
// catches a pause or a lower cap that landed between leasing and handing out. In a cluster
// handOut does not ask: the lease's own transaction checked the queue's pause and cap in the
// database, against every broker's leases, and a change committed after it comes after the
// lease: the cache, which may not have heard of the latest change yet, must not overrule it.
func (b *Broker) mayHandOutLocked(queue string, held map[string]int) bool {
	r := b.queues.queueRules[queue]
	q := dispatchrule.Queue{Paused: r.paused, Cap: r.limit, Held: held[queue]}
	return dispatchrule.QueueReason(q) == dispatchrule.None
}
