package broker

import (
	"context"
	"errors"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
)

// op is one unit of work for the writer. apply runs inside a transaction shared with other
// ops and may run more than once (a retried or split batch), so it must set its results
// afresh each time. done runs after the commit (or failure) on the writer goroutine; it must
// not block.
type op struct {
	name  string
	apply func(tx store.Tx) error
	done  func(err error)

	// A start op names its lease in starts; a result op in finishes. A start whose result is
	// in the same batch is superseded: the result's write records the attempt by itself, so
	// a job that runs within one commit window costs one write, not two.
	starts, finishes job.LeaseRef
	superseded       bool
	waited           bool // a start already held back once (see holdStarts)

	// frees is the session whose slot the op frees once it commits: a result or a release
	// answers its worker (ResultAck, Refused) in its done, which runs before the done of the
	// batch's lease, so the batch's own round may count that slot as free (freedSlots).
	frees *Session
	// usesFreed marks a lease that counted such slots: it stands or falls with its batch
	// and is never written alone (see finish).
	usesFreed bool

	// readies marks an op that makes jobs ready (an enqueue): the writer plans a dispatch
	// round into the same transaction, so those jobs are leased by the commit that stores them.
	readies bool

	// succeed, when set, is a success that commit writes together with the batch's other
	// successes in one statement (tx.JobSucceedMany), setting succeeded; apply does the same
	// for this op alone.
	succeed   *store.JobFinishParams
	succeeded bool
	// unread is why the store could not say whether succeed applied (its answer, sent with
	// COMMIT, was lost or unreadable): the op is answered as failed by storage, and its worker
	// sends the result again, which the store then finds applied or not.
	unread error
	// start, when set, is a start that commit writes with the batch's other starts in one
	// statement (see grouped), setting applied; apply does the same for this op alone.
	start   *store.JobStartParams
	applied bool
	// insert, when set, are jobs without idempotency keys that commit stores with the batch's
	// other such jobs in one statement (see grouped), then hands their results to inserted;
	// apply does the same for this op alone.
	insert   []*store.JobInsertParams
	inserted func(tx store.Tx, results []store.JobInsertResult)
	// offers, when set, has one entry per job of insert: the worker slot it is offered to, or
	// nil (see offer.go). leased are the jobs the insert leased, nil where it did not; nil as
	// a whole until the store answers.
	offers []*offer
	leased []*job.Job

	// locksQueues marks an op that may lock queues' rows (a lease, a queue change): it applies
	// after the batch's breakers are locked (see breakerBatch). probeTypes are the types whose
	// breakers a lease's probe grants lock, locked with the batch's others.
	locksQueues bool
	probeTypes  []string

	// deadline is when the caller waiting for the op stops waiting (zero: no deadline). The
	// batch's storage retries stop at the earliest one rather than run on for nobody.
	deadline time.Time
	// state tells whether the writer took the op or its caller withdrew it (see reach.go).
	state opState
}

// submit queues an op for the writer.
func (b *Broker) submit(o *op) { b.submitTo(b.ops, o) }

// submitTo queues an op for the writer that reads ops.
func (b *Broker) submitTo(ops chan<- *op, o *op) {
	select {
	case ops <- o:
	case <-b.stop:
		o.done(ErrShuttingDown)
	}
}

// do runs apply through the writer and waits for its commit.
func (b *Broker) do(ctx context.Context, name string, apply func(tx store.Tx) error) error {
	return b.doOp(ctx, &op{name: name, apply: apply})
}

// doOp runs o (whose done must be unset) through the writer and waits for its commit.
func (b *Broker) doOp(ctx context.Context, o *op) error { return b.doOpOn(ctx, b.ops, o) }

// doOpOn runs o (whose done must be unset) through the writer that reads ops and waits for its
// commit.
func (b *Broker) doOpOn(ctx context.Context, ops chan<- *op, o *op) error {
	var lost <-chan struct{}
	// A caller is not held while the database is silent (reach.go). The broker's own writes
	// (on b.ctx: sweeps, promotion) wait: nobody waits on them, and the first to get through
	// tells the broker that its database answers again.
	if ctx != b.ctx {
		if err := b.Unreachable(); err != nil {
			return err
		}
		lost = b.lost()
	}
	errc := make(chan error, 1)
	o.done = func(err error) { errc <- err }
	o.deadline, _ = ctx.Deadline()
	b.submitTo(ops, o)
	select {
	case err := <-errc:
		return err
	case <-lost:
		return b.unreached(o)
	case <-b.stop:
		return ErrShuttingDown
	case <-ctx.Done():
		// The op may still commit; the caller is told it does not know. An idempotency key
		// makes a retried enqueue safe.
		return context.Cause(ctx)
	}
}

// startWindow is how long a start may wait for its job's result to join it in one commit.
// Most jobs finish within a commit or two of starting; their start then costs no write at all
// (see op.superseded). The wait only delays when storage shows RUNNING, never a message to a
// worker or producer; it is a property of group commit, not a scheduling decision, so it runs
// on the wall clock.
const startWindow = 2 * time.Millisecond

// writeLoop is the single writer: it takes every op that is waiting (up to MaxBatch) and
// commits them in one transaction. It also runs dispatch: when asked to (signal) or when the
// batch makes jobs ready, it plans a round and adds its lease as the batch's last op.
func (b *Broker) writeLoop() {
	defer b.stopped.Done()
	batch := make([]*op, 0, b.cfg.MaxBatch+1)
	var held []*op // starts waiting for one more batch
	window := time.NewTimer(time.Hour)
	window.Stop()
	for {
		batch = append(batch[:0], held...)
		held = held[:0]
		dispatch := false
		wait := window.C
		if len(batch) == 0 {
			wait = nil
		} else {
			window.Reset(startWindow)
		}
		select {
		case o := <-b.ops:
			if o.take() {
				batch = append(batch, o)
			}
		case <-b.wake:
			dispatch = true
		case <-wait:
		case <-b.stop:
			for _, o := range batch {
				o.done(ErrShuttingDown)
			}
			failPending(b.ops)
			return
		}
		window.Stop()
	fill:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case o := <-b.ops:
				if o.take() {
					batch = append(batch, o)
				}
			case <-b.wake:
				dispatch = true
			default:
				break fill
			}
		}
		markSuperseded(batch)
		batch, held = holdStarts(batch, held)
		readies := false
		for _, o := range batch {
			readies = readies || o.readies
		}
		freed := freedSlots(batch)
		if dispatch || readies || freed != nil {
			if grants := b.planRound(readies, freed); len(grants) > 0 {
				o := b.leaseOp(grants)
				o.usesFreed = len(freed) > 0
				batch = append(batch, o)
			}
		}
		if len(batch) > 0 {
			b.commit(batch)
		}
	}
}

// holdStarts moves out of batch the starts seen for the first time whose result is not in
// it, so that they wait one batch (at most startWindow) for it.
func holdStarts(batch, held []*op) ([]*op, []*op) {
	keep := batch[:0]
	for _, o := range batch {
		if o.starts.JobID != 0 && !o.superseded && !o.waited {
			o.waited = true
			held = append(held, o)
			continue
		}
		keep = append(keep, o)
	}
	return keep, held
}

// commit writes batch in one transaction and answers its ops.
func (b *Broker) commit(batch []*op) {
	var g grouped
	// Commit timing is a measurement of storage, not a decision, so it reads the wall clock.
	began := time.Now()
	err := b.st.Write(b.batchContext(batch), batchName(batch), func(tx store.Tx) error {
		g.reset()
		return b.applyBatch(tx, batch, &g)
	})
	b.breakerBatch = breakerBatch{} // a failed batch's breakers were rolled back
	if b.settleOffers(batch, err) {
		b.signal()
	}
	b.finish(batch, began, err, b.commit, func(o *op) error {
		err := b.st.Write(b.ctx, o.name, func(tx store.Tx) error { return b.applyBatch(tx, []*op{o}, nil) })
		b.breakerBatch = breakerBatch{}
		return err
	})
}

// batchName names a batch's write for logs and counters.
func batchName(batch []*op) string {
	if len(batch) > 1 {
		return "batch"
	}
	return batch[0].name
}

// batchContext is the writer's context, with the earliest deadline of batch's callers for the
// storage retries to keep to.
func (b *Broker) batchContext(batch []*op) context.Context {
	if d := earliestDeadline(batch); !d.IsZero() {
		return storeretry.WithDeadline(b.ctx, d)
	}
	return b.ctx
}

// finish answers batch's ops once its write, begun at began, ended with err. A batch that
// failed as a whole for one op's sake is written again without that op's callers (again) or
// op by op (alone), so that only the faulty op fails.
func (b *Broker) finish(batch []*op, began time.Time, err error, again func([]*op), alone func(*op) error) {
	b.obs.BatchCommitted(len(batch), time.Since(began), err)
	var busy *storeretry.BusyError
	if errors.As(err, &busy) && busy.StoppedForDeadline() {
		// The retries stopped for the callers with a deadline; the others (worker messages,
		// dispatch) are owed the whole retry budget, so they go on without those callers.
		var rest []*op
		for _, o := range batch {
			if o.deadline.IsZero() {
				rest = append(rest, o)
				continue
			}
			o.done(err)
		}
		if len(rest) > 0 {
			again(rest)
		}
		return
	}
	// Busy or unavailable storage already had its retries; splitting would only wait them out
	// once per op.
	if err != nil && len(batch) > 1 && !errors.Is(err, context.Canceled) && !errors.Is(err, storeretry.ErrBusy) &&
		!errors.Is(err, store.ErrUnavailable) {
		// One op's error must not fail the others: run each alone so only the faulty one fails.
		// A lease that counted the slots of the batch's results fails with the batch: alone, it
		// could hand a worker a job for a slot whose result was not stored.
		for _, o := range batch {
			if o.usesFreed {
				o.done(err)
				continue
			}
			o.superseded = false
			o.done(alone(o))
		}
		return
	}
	for _, o := range batch {
		o.done(err)
	}
}

// applyBatch applies batch's ops in tx, g gathering those it stores many to a statement (nil: each
// applies alone). It keeps the lock order of the rows brokers that share a database contend
// for: first the jobs the ops and g write, then the finished totals they change (the store
// writes them at once, sorted, before it locks a breaker or a queue), then the breakers the
// batch changes or probes (flushBreakers, sorted by type), then the capped queues (the ops that lock them, the round's
// lease last, each locking all capped queues in name order); see breakerBatch.
func (b *Broker) applyBatch(tx store.Tx, batch []*op, g *grouped) error {
	b.batchBreakers(tx, batch)
	for _, o := range batch {
		if o.locksQueues || (g != nil && g.add(o)) {
			continue
		}
		if err := o.apply(tx); err != nil {
			return err
		}
	}
	if g != nil {
		if err := g.write(tx); err != nil {
			return err
		}
	}
	if err := b.flushBreakers(tx); err != nil {
		return err
	}
	for _, o := range batch {
		if !o.locksQueues {
			continue
		}
		if err := o.apply(tx); err != nil {
			return err
		}
	}
	return nil
}

// failPending answers the ops still queued on ops at shutdown.
func failPending(ops <-chan *op) {
	for {
		select {
		case o := <-ops:
			o.done(ErrShuttingDown)
		default:
			return
		}
	}
}

// markSuperseded flags the start ops whose lease's result is in the same batch.
func markSuperseded(batch []*op) {
	var finishing map[job.LeaseRef]bool
	for _, o := range batch {
		if o.finishes.JobID != 0 {
			if finishing == nil {
				finishing = make(map[job.LeaseRef]bool)
			}
			finishing[o.finishes] = true
		}
	}
	if finishing == nil {
		return
	}
	for _, o := range batch {
		if o.starts.JobID != 0 && finishing[o.starts] {
			o.superseded = true
		}
	}
}

// freedSlots counts, per session, the slots that batch's results and releases free once it
// commits; nil when none.
func freedSlots(batch []*op) map[*Session]int {
	var freed map[*Session]int
	for _, o := range batch {
		if o.frees == nil {
			continue
		}
		if freed == nil {
			freed = make(map[*Session]int)
		}
		freed[o.frees]++
	}
	return freed
}

// earliestDeadline is the earliest deadline of the ops' callers, zero when none has one.
func earliestDeadline(batch []*op) time.Time {
	var d time.Time
	for _, o := range batch {
		if !o.deadline.IsZero() && (d.IsZero() || o.deadline.Before(d)) {
			d = o.deadline
		}
	}
	return d
}
