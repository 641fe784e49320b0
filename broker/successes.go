package broker

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/store"
)

// A breaker that counts every call (ratio mode) counts successes as well as failures, and in a
// cluster its window is stored. Storing each success with the write that stores the job's
// result put a breaker write (a lock or a checked save of the type's row) into every group
// commit that held a success: on PostgreSQL about a ninth of the database's time per job under
// one producer. So a success of an ordinary permit (not a probe's, one the broker kept) is
// counted in memory once its write committed, and stored with the type's next breaker write:
// a failure's, a probe's, an operator's, or at the latest breakerSaveDelay after it, by a write
// of its own (successesOp). Within the broker the count is exact: a failure that could open the
// breaker is counted after every success this broker stored before it. What another broker
// reads lags this one's successes by at most breakerSaveDelay, so its ratio may run high for
// that long, and a crash forgets at most that much of them, as a lone broker forgets the last
// failures it counted (breakerKeeper).
//
// A success is counted when folded into the stored breaker, in the window's bucket of that
// moment, not of its commit: at most breakerSaveDelay later, a few hundredths of the default
// SamplingWindow. A breaker that left CLOSED meanwhile counts it nowhere, as it would not
// count a result of a permit from before its change (breaker.Shared.Permit).

// heldSuccesses are the committed successes of ordinary permits not yet in their stored
// breakers, per type. Only the writer goroutine reads or changes ids and folding.
type heldSuccesses struct {
	ids map[string][]int64 // the jobs whose successes wait, per type, oldest first
	// folding counts, per type, the successes the batch being written stores.
	folding map[string]int
	// armed is set while a successesOp is due or waiting for the writer.
	armed atomic.Bool
}

// fold counts typ's held successes in sh, the type's breaker as the batch being written stores
// it.
func (h *heldSuccesses) fold(typ string, sh *breaker.Shared) {
	ids := h.ids[typ]
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		sh.Success(sh.Permit(id, breaker.Permit{}))
	}
	if h.folding == nil {
		h.folding = make(map[string]int)
	}
	h.folding[typ] = len(ids)
}

// written forgets the held successes the batch stored, if it committed (err nil).
func (h *heldSuccesses) written(err error) {
	if err == nil {
		for typ, n := range h.folding {
			if rest := h.ids[typ][n:]; len(rest) > 0 {
				h.ids[typ] = rest
			} else {
				delete(h.ids, typ)
			}
		}
	}
	h.folding = nil
}

// holdSuccess holds the committed success of job id, of type typ, for its breaker, and makes
// sure a write stores it within breakerSaveDelay. Only the writer goroutine calls it (a
// result's Done).
func (b *Broker) holdSuccess(typ string, id int64) {
	h := &b.writing.successes
	if h.ids == nil {
		h.ids = make(map[string][]int64)
	}
	h.ids[typ] = append(h.ids[typ], id)
	if h.armed.CompareAndSwap(false, true) {
		b.clk.AfterFunc(breakerSaveDelay, func() { b.submit(&successesOp{b: b}) })
	}
}

// successesOp stores the held successes of every type in their breakers: their types' breakers
// are changed by nothing else, and the batch's flush folds the successes in (flushBreakers).
type successesOp struct {
	b  *Broker
	ch breakerChanges
}

func (o *successesOp) Name() string { return "breaker_successes" }

func (o *successesOp) Apply(tx store.Tx) error {
	o.ch.reset()
	for _, typ := range slices.Sorted(maps.Keys(o.b.writing.successes.ids)) {
		if err := o.b.changeBreaker(tx, &o.ch, typ, func(*breaker.Shared) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

// Done lets the next batch arm another save of what is still held (a failed write's).
func (o *successesOp) Done(err error) {
	if err == nil {
		o.b.applyBreakerChanges(o.ch)
	}
	o.b.writing.successes.armed.Store(false)
}

// storeHeldSuccesses stores the held successes through the writer, before it stops
// (Shutdown): a broker that stops in order forgets none.
func (b *Broker) storeHeldSuccesses(ctx context.Context) {
	if !b.sharedBreakers() {
		return
	}
	if err := b.doOp(ctx, &successesOp{b: b}); err != nil {
		b.log.Warn("store the successes held for the breakers", "err", err)
	}
}
