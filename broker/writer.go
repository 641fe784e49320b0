package broker

import (
	"context"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/store"
)

// Commit chooses the writer that commits the broker's operations (package commit).
type Commit int

const (
	// GroupCommit commits whatever operations are waiting in one transaction, with a dispatch
	// round as the batch's last operation: the broker's writer.
	GroupCommit Commit = iota
	// OneByOne commits each operation in a transaction of its own: the reference group commit
	// is tested against, slower by as much as a transaction costs.
	OneByOne
)

func (c Commit) String() string {
	if c == OneByOne {
		return "one-by-one"
	}
	return "group-commit"
}

// newWriters makes the writer and, in a cluster, the enqueue writer (enqueuer.go).
func (b *Broker) newWriters(c Commit) {
	cfg := commit.Config{Store: b.st, Ctx: b.ctx, MaxBatch: b.cfg.MaxBatch, Owner: batches{b}, Stop: b.writing.stop,
		Stopped: ErrShuttingDown, Observe: b.obs.BatchCommitted, LockJobs: b.mode.concurrentWriters()}
	ecfg := cfg
	ecfg.Owner = enqueueBatches{b}
	if c == OneByOne {
		b.writing.writer, b.writing.enqueuer = commit.NewPlain(cfg), commit.NewPlain(ecfg)
		return
	}
	b.writing.writer, b.writing.enqueuer = commit.NewGrouped(cfg), commit.NewGrouped(ecfg)
}

// runWriters starts the writers' goroutines, which end when b.writing.stop is closed.
func (b *Broker) runWriters() {
	b.writing.stopped.Add(1)
	go func() {
		defer b.writing.stopped.Done()
		b.writing.writer.Run()
	}()
	if b.mode.concurrentWriters() {
		b.writing.stopped.Add(1)
		go func() {
			defer b.writing.stopped.Done()
			b.writing.enqueuer.Run()
		}()
	}
}

// submit queues an op for the writer; its Done is its only answer.
func (b *Broker) submit(o commit.Op) { b.writing.writer.Submit(o) }

// do runs apply through the writer and waits for its commit.
func (b *Broker) do(ctx context.Context, name string, apply func(tx store.Tx) error) error {
	return b.doOp(ctx, &funcOp{name: name, apply: apply})
}

// doOp runs o through the writer and waits for its commit.
func (b *Broker) doOp(ctx context.Context, o commit.Op) error {
	return b.doOn(ctx, b.writing.writer, o)
}

// doOn runs o through w and waits for its commit.
func (b *Broker) doOn(ctx context.Context, w commit.Writer, o commit.Op) error {
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
	deadline, _ := ctx.Deadline()
	t := w.Enter(o, deadline)
	select {
	case err := <-t.Answer():
		if t.Traced() {
			stages.Mark(stages.Answered)
		}
		return err
	case <-lost:
		return b.unreached(t)
	case <-b.writing.stop:
		return ErrShuttingDown
	case <-ctx.Done():
		// The op may still commit; the caller is told it does not know. An idempotency key
		// makes a retried enqueue safe.
		return context.Cause(ctx)
	}
}

// funcOp is a write with nothing to do once committed but answer its caller (do).
type funcOp struct {
	name  string
	apply func(tx store.Tx) error
	// locks marks a write that may lock queues' rows (a queue change): it applies after the
	// batch's breakers are locked (see breakerBatch).
	locks bool
}

func (o *funcOp) Name() string            { return o.name }
func (o *funcOp) Apply(tx store.Tx) error { return o.apply(tx) }
func (o *funcOp) Done(error)              {}
func (o *funcOp) LocksQueues() bool       { return o.locks }

// slotFreer is an op that frees its session's slot once it commits: a result or a release
// answers its worker (ResultAck, Refused) in its Done, which runs before the Done of the
// batch's lease, so the batch's own round may count that slot as free (freedSlots).
type slotFreer interface{ frees() *Session }

// prober is an op whose probe grants lock their types' breakers with the batch's others (see
// breakerBatch).
type prober interface{ probeTypes() []string }

// batches is the broker as the owner of its writer's batches: it plans the dispatch round a
// batch carries and keeps the lock order of shared breakers (breakerBatch).
type batches struct{ b *Broker }

// Round plans a dispatch round to join batch when asked, when batch makes jobs ready or frees
// worker slots.
func (o batches) Round(batch []commit.Op, asked, ready bool) commit.Op {
	freed := freedSlots(batch)
	if !asked && !ready && freed == nil {
		return nil
	}
	grants := o.b.planRound(ready, freed)
	if len(grants) == 0 {
		return nil
	}
	lease := o.b.newLeaseOp(grants)
	lease.usesFreed = len(freed) > 0
	return lease
}

func (o batches) Begin(tx store.Tx, batch []commit.Op) { o.b.batchBreakers(tx, batch) }
func (o batches) Flush(tx store.Tx) error              { return o.b.flushBreakers(tx) }

// Written forgets the batch's breakers (a failed batch's were rolled back) and the held
// successes it stored (successes.go), and settles its offers.
func (o batches) Written(batch []commit.Op, err error) {
	o.b.writing.seen.written(&o.b.writing.breakerBatch, err, o.b.now)
	o.b.writing.breakerBatch = breakerBatch{}
	o.b.writing.successes.written(err)
	o.b.batchesWritten(batch, err)
	if o.b.settleOffers(batch, err) {
		o.b.signal()
	}
}

// freedSlots counts, per session, the slots that batch's results and releases free once it
// commits; nil when none.
func freedSlots(batch []commit.Op) map[*Session]int {
	var freed map[*Session]int
	for _, o := range batch {
		f, ok := o.(slotFreer)
		if !ok || f.frees() == nil {
			continue
		}
		if freed == nil {
			freed = make(map[*Session]int)
		}
		freed[f.frees()]++
	}
	return freed
}
