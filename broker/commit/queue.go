package commit

import (
	"context"
	"slices"
	"time"

	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// Config is what a writer needs.
type Config struct {
	Store store.Store
	// Ctx is the writes' context; it ends when the owner stops.
	Ctx      context.Context
	MaxBatch int
	Owner    Owner
	// Stop is closed when the writer is to stop; the ops queued then, and those submitted
	// after, are told Stopped.
	Stop    <-chan struct{}
	Stopped error
	// Observe hears of each batch's write: its ops, how long it took and how it ended. Nil:
	// nobody listens.
	Observe func(ops int, took time.Duration, err error)
	// LockJobs says that other transactions may write the jobs this writer's do at the same
	// time (another broker's writer on the same database): each batch then locks every job it
	// writes first, in id order (see JobWriter). A writer alone on its jobs leaves it unset and
	// spends nothing on the locks.
	LockJobs bool
	// Now is the wall clock the group-commit writer's windows run on (StartWindow); nil:
	// time.Now. Window, when not zero, replaces StartWindow. Both are for tests.
	Now    func() time.Time
	Window time.Duration
}

// queue is what both writers share: the ops waiting, the wake-up for a dispatch round, and the
// write of one transaction.
type queue struct {
	cfg   Config
	in    chan *Ticket
	wake  chan struct{}
	ops   []Op    // the ops of the batch being written, for the owner (opsOf)
	locks []int64 // the jobs the batch being written writes (jobsWritten)
}

func newQueue(cfg Config) queue {
	if cfg.Observe == nil {
		cfg.Observe = func(int, time.Duration, error) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Window == 0 {
		cfg.Window = StartWindow
	}
	return queue{cfg: cfg, in: make(chan *Ticket, 4*cfg.MaxBatch), wake: make(chan struct{}, 1)}
}

// Submit queues o; its Done is its only answer.
func (q *queue) Submit(o Op) { q.put(&Ticket{op: o}) }

// Enter queues o for a caller that waits on the ticket.
func (q *queue) Enter(o Op, deadline time.Time) *Ticket {
	t := &Ticket{op: o, deadline: deadline, answer: make(chan error, 1), traced: stages.MarkAfter(stages.Handler, stages.Queued)}
	q.put(t)
	return t
}

func (q *queue) put(t *Ticket) {
	select {
	case <-q.cfg.Stop:
		t.done(q.cfg.Stopped) // not left in the queue, which nobody reads any more
		return
	default:
	}
	select {
	case q.in <- t:
	case <-q.cfg.Stop:
		t.done(q.cfg.Stopped)
	}
}

// Wake asks for a dispatch round.
func (q *queue) Wake() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Queued is the number of ops queued and not yet taken.
func (q *queue) Queued() int { return len(q.in) }

// failPending answers the ops still queued at stop.
func (q *queue) failPending() {
	for {
		select {
		case t := <-q.in:
			t.done(q.cfg.Stopped)
		default:
			return
		}
	}
}

// opsOf is batch's ops in order, for the owner, in a slice the next call reuses.
func (q *queue) opsOf(batch []*Ticket) []Op {
	q.ops = q.ops[:0]
	for _, t := range batch {
		q.ops = append(q.ops, t.op)
	}
	return q.ops
}

// write writes batch, whose ops are ops (opsOf), in one transaction, g gathering the ops it
// stores many to a statement (nil: each applies alone), with the at-commit reads sent with
// COMMIT when deferred. It keeps the store's lock order: first every job the batch writes, in id
// order when Config.LockJobs (jobsWritten), then the ops that lock no queue and g's statements,
// then the owner's Flush, then the ops that lock queues.
func (q *queue) write(ctx context.Context, batch []*Ticket, ops []Op, g *grouped, deferred bool) error {
	owner := q.cfg.Owner
	q.locks = q.locks[:0]
	if q.cfg.LockJobs {
		q.locks = jobsWritten(batch, q.locks)
	}
	locks := q.locks
	traced := tracedIn(batch)
	markIf(traced, stages.CommitStart)
	err := q.cfg.Store.Write(ctx, batchName(batch), func(tx store.Tx) error {
		// One job alone is locked by its write, before any other row: the order needs no help.
		if len(locks) > 1 {
			if err := tx.JobLockRows(locks); err != nil {
				return err
			}
		}
		owner.Begin(tx, ops)
		if g != nil {
			g.reset()
		}
		for _, t := range batch {
			if locksQueues(t.op) || (g != nil && g.add(t)) {
				continue
			}
			if err := apply(tx, t, deferred); err != nil {
				return err
			}
		}
		if g != nil {
			if err := g.write(tx); err != nil {
				return err
			}
		}
		if err := owner.Flush(tx); err != nil {
			return err
		}
		for _, t := range batch {
			if !locksQueues(t.op) {
				continue
			}
			if err := apply(tx, t, deferred); err != nil {
				return err
			}
		}
		return nil
	})
	markIf(traced, stages.CommitEnd)
	owner.Written(ops, err)
	return err
}

// apply writes t's op alone in tx, then its at-commit reads (sent with COMMIT when deferred). A
// superseded start writes nothing: its result records the attempt.
func apply(tx store.Tx, t *Ticket, deferred bool) error {
	if t.superseded {
		t.op.(Starter).Started(true)
		return nil
	}
	if err := t.op.Apply(tx); err != nil {
		return err
	}
	a, ok := t.op.(AtCommit)
	if !ok {
		return nil
	}
	r := a.AtCommit()
	if deferred {
		return readAtCommit(tx, r)
	}
	return readNow(tx, r)
}

// readAtCommit asks the store for r's reads with COMMIT.
func readAtCommit(tx store.Tx, r Reads) error {
	if len(r.ShutTypes) > 0 {
		if err := tx.BreakerShutAtCommit(r.ShutTypes, r.Shut); err != nil {
			return err
		}
	}
	for i, ps := range r.Leases {
		err := tx.JobLeaseAtCommit(ps, func(jobs [][]*job.Job, err error) { r.Leased(i, jobs, err) })
		if err != nil {
			return err
		}
	}
	return nil
}

// readNow makes r's reads at once, one statement each, as the reference for readAtCommit. Their
// failure fails the transaction, as it does at commit.
func readNow(tx store.Tx, r Reads) error {
	if len(r.ShutTypes) > 0 {
		recs, err := tx.BreakerGet(r.ShutTypes)
		if err != nil {
			return err
		}
		var shut []store.BreakerRecord
		for _, rec := range recs {
			if rec.Shut {
				shut = append(shut, rec)
			}
		}
		r.Shut(shut, nil)
	}
	for i, ps := range r.Leases {
		jobs := make([][]*job.Job, len(ps))
		for k, p := range ps {
			leased, err := tx.JobLease(p)
			if err != nil {
				return err
			}
			jobs[k] = leased
		}
		r.Leased(i, jobs, nil)
	}
	return nil
}

// batchName names a batch's write for logs and counters.
func batchName(batch []*Ticket) string {
	if len(batch) > 1 {
		return "batch"
	}
	return batch[0].op.Name()
}

// batchContext is ctx with the earliest deadline of batch's callers for the storage retries to
// keep to.
func batchContext(ctx context.Context, batch []*Ticket) context.Context {
	var d time.Time
	for _, t := range batch {
		if !t.deadline.IsZero() && (d.IsZero() || t.deadline.Before(d)) {
			d = t.deadline
		}
	}
	if !d.IsZero() {
		return storeretry.WithDeadline(ctx, d)
	}
	return ctx
}

// jobsWritten appends to ids the jobs batch's ops write that exist already (JobWriter), sorted
// and each once, for the transaction to lock before it writes any. A superseded start writes
// nothing, but its result writes the same job.
func jobsWritten(batch []*Ticket, ids []int64) []int64 {
	for _, t := range batch {
		if s, ok := t.op.(Starter); ok {
			ids = append(ids, s.StartParams().Ref.JobID)
		}
		if f, ok := t.op.(Finisher); ok {
			ids = append(ids, f.Finishes().JobID)
		}
		if w, ok := t.op.(JobWriter); ok {
			ids = append(ids, w.WritesJobs()...)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
