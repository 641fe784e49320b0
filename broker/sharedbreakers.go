package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Brokers that serve one database (Options.Cluster) share one circuit breaker per job type. The breaker's state
// stored in the database is then the authority, and each broker's breaker.Set only a cache of it
// (breaker.Set.Cache), read to plan dispatch rounds:
//
//   - Everything that can change a breaker is applied to its stored state inside a write
//     transaction that holds the type's breaker locked (Tx.BreakerLock), or saves it only if
//     still stored as the writer last left it (breakersSeen, Tx.BreakerSaveIf), by the broker it
//     happens on, in the same transaction as the write that causes it: a result's failure with the
//     result, a probe's slot with the lease of its job, a lease's end with the write that ends
//     it, an operator's reset or force on its own. The transaction publishes store.EventBreaker
//     when what dispatch depends on changed (state, generation, probes in flight).
//   - The probe slots are stored with the job they were taken for, so whichever broker ends the
//     job's lease (its result through another broker after a reconnect, the sweep of its expired
//     lease, a cancel) frees the slot, also after the broker that dispatched it died. A probe
//     that nobody ends frees its slot after ProbeTimeout.
//   - A lease of jobs outside a probe reads the stored breakers of its types and leaves out the
//     types not CLOSED there, so a broker whose cache still says CLOSED does not hand out jobs
//     of a type another broker has just opened. What remains is the window of one transaction:
//     jobs leased by a transaction that read CLOSED before another one committed the opening,
//     as on one broker a job dispatched just before its breaker opens.
//   - The hot paths cost nothing: a permit taken while CLOSED and a success outside a probe need
//     no database work.
//
// Transitions are reported (logged, counted) by the broker whose transaction applied them,
// once it committed, so each transition of the cluster is reported once, in generation order.
// The cache catches up on the states its own transactions store and read, on store.EventBreaker
// and store.EventResync (refreshBreakers), and at every sweep tick as a fallback.
//
// A lease may be ended twice in the database: a worker's failure and the sweep of its expired
// lease, or the sweeps of two brokers that both lead for a moment, each read the lease current,
// and the second write is told it is already applied. Each then settles the permit. Settling a
// probe's permit again finds its slot gone, and a permit of an older generation counts nowhere;
// a failure while CLOSED is counted once because the breaker remembers the attempts it counted
// (breaker.Shared.Failure).

// breakersInStore keeps a cluster's breakers in the database, the broker's set a cache of them.
type breakersInStore struct{ b *Broker }

func newBreakersInStore(b *Broker) breakersInStore {
	b.breakers.Cache()
	return breakersInStore{b: b}
}

func (breakersInStore) shared() bool { return true }

// leaseProbes leases probes through their stored slots (Broker.leaseProbes).
func (h breakersInStore) leaseProbes(tx store.Tx, ch *breakerChanges, g *grant) (bool, error) {
	return true, h.b.leaseProbes(tx, ch, g)
}

// probesNotLeased drops the permits: the failed write took no stored slot.
func (breakersInStore) probesNotLeased(g *grant) { g.permits = nil }

// takeProbePermitsLocked does nothing: the lease's write took the stored slots.
func (breakersInStore) takeProbePermitsLocked(*grant) {}

// release does nothing: a probe slot is released by the write that hands its job back, and any
// other permit holds nothing.
func (breakersInStore) release(breaker.Permit) {}

// settleLocked does nothing: the write that ended the lease settled its permit (settleShared).
func (breakersInStore) settleLocked(*lease, permitEnd, breaker.FailureKind) {}

// restore clears the shut mark of breakers this broker's configuration disables, and reads
// the stored states into the cache.
func (h breakersInStore) restore(ctx context.Context) error {
	if err := h.b.unshutDisabledBreakers(ctx); err != nil {
		return err
	}
	return h.b.refreshBreakers(ctx)
}

// list reads the stored breakers first, so that every broker lists the same states.
func (h breakersInStore) list() []breaker.Info {
	if err := h.b.refreshBreakers(h.b.ctx); err != nil {
		h.b.log.Warn("read shared breakers; listing the cached states", "err", err)
	}
	return h.b.breakers.List()
}

// change applies an operator's change to the stored breaker, with its audit event, in one write.
func (h breakersInStore) change(ctx context.Context, typ string, ev store.AuditEvent, _ func() (breaker.Info, error),
	fn func(sh *breaker.Shared) error) (breaker.Info, error) {
	return h.b.adminShared(ctx, typ, ev, fn)
}

// swept refreshes the cache: the fallback for breaker changes this broker did not hear of.
func (h breakersInStore) swept(ctx context.Context) {
	if err := h.b.refreshBreakers(ctx); err != nil {
		h.b.log.Warn("refresh shared breakers", "err", err)
	}
}

// sharedBreakers reports whether the breakers live in the database (breakersInStore).
func (b *Broker) sharedBreakers() bool { return b.mode.breakers().shared() }

// writeSettles is how the write that ends a lease settles its breaker permit.
type writeSettles int

const (
	// settlesAfter: not in the write; in memory once it committed, if at all.
	settlesAfter writeSettles = iota
	// settlesSuccessLater: an ordinary permit of a stored breaker that counts every call (ratio
	// mode): a failure is settled in the write that ends the lease, a success held once its
	// write committed and stored with the type's next breaker write (successes.go).
	settlesSuccessLater
	// settlesAlone: a permit the broker did not keep (a lease adopted) or a probe's, settled by
	// the write of its own result (settleShared).
	settlesAlone
)

// settlesInWrite says how the permit of a lease of typ is settled in the write that ends the
// lease (settleShared): a permit the broker did not keep and a probe's alone, the failure of
// any other permit of a breaker that counts every call (ratio mode) in the write too, its
// success later.
func (h breakersInStore) settlesInWrite(p breaker.Permit, typ string) writeSettles {
	if p.Generation == 0 || p.IsProbe() {
		return settlesAlone
	}
	if cfg := h.b.breakers.ConfigFor(typ); !cfg.Disabled && cfg.Mode == breaker.ModeRatio {
		return settlesSuccessLater
	}
	return settlesAfter
}

// breakerChanges are the shared breakers one op's transaction read or changed, to give to the
// cache and report once it commits. An op's apply may run more than once: it resets them first.
type breakerChanges []*breaker.Shared

func (c *breakerChanges) reset() { *c = (*c)[:0] }

// lockBreaker reads typ's shared breaker in tx, holding it locked until tx ends.
func (b *Broker) lockBreaker(tx store.Tx, typ string) (*breaker.Shared, error) {
	sh, _, err := b.lockBreakerData(tx, typ)
	return sh, err
}

// lockBreakerData is lockBreaker, also returning the stored breaker it read.
func (b *Broker) lockBreakerData(tx store.Tx, typ string) (*breaker.Shared, seenBreaker, error) {
	initial, err := json.Marshal(breaker.Saved{Type: typ, State: breaker.StateClosed, Generation: 1})
	if err != nil {
		return nil, seenBreaker{}, err
	}
	if b.writing.lockingBreaker != nil {
		b.writing.lockingBreaker(typ, false)
	}
	data, err := tx.BreakerLock(typ, initial)
	if err != nil {
		return nil, seenBreaker{}, err
	}
	if b.writing.lockingBreaker != nil {
		b.writing.lockingBreaker(typ, true)
	}
	saved, err := decodeBreaker(typ, data)
	if err != nil {
		return nil, seenBreaker{}, err
	}
	sh, err := b.breakers.Shared(typ, &saved)
	return sh, seenBreaker{data: data, saved: saved}, err
}

// storeBreaker stores sh if it changed, and tells the other brokers if dispatch depends on the
// change.
func (b *Broker) storeBreaker(tx store.Tx, sh *breaker.Shared) error {
	if !sh.Changed() {
		return nil
	}
	return b.saveBreaker(tx, sh, nil)
}

// seenBreaker is a breaker as stored: its document and what it decodes to. Shared breakers
// built from saved copy what they change of it, so one saved may build several.
type seenBreaker struct {
	data  []byte
	saved breaker.Saved
}

// saveBreaker stores sh (with tx.BreakerSaveIf when un is not nil: if still stored as un saw
// it), tells the other brokers if dispatch depends on the
// change, and, in the writer's batch, keeps what it stored for breakersSeen.
func (b *Broker) saveBreaker(tx store.Tx, sh *breaker.Shared, un *unlockedBreaker) error {
	saved := sh.Saved()
	rec, err := b.encodeBreaker(saved)
	if err != nil {
		return err
	}
	if un != nil {
		err = tx.BreakerSaveIf(rec, un.seen, nil)
	} else {
		err = tx.BreakerSave(rec)
	}
	if err != nil {
		return err
	}
	if sh.Moved() {
		tx.Publish(store.Event{Kind: store.EventBreaker, Key: rec.Type})
	}
	if bb := &b.writing.breakerBatch; bb.tx == tx && bb.stored != nil {
		bb.stored[rec.Type] = seenBreaker{data: rec.Data, saved: saved}
	}
	return nil
}

// seenOffFor is how long the writer locks a type's breaker for every change after a save of it
// without the lock (saveBreaker with seen) found it changed: another broker is counting the
// same type, and each such miss costs the batch a second run.
const seenOffFor = 10 * time.Second

// breakersSeen is what the writer knows of the stored breakers it wrote last, so that a batch
// that only counts in a breaker saves it in the commit (tx.BreakerSaveIf) instead of first
// locking it, a round trip of its own: a failure, or the successes held for the type
// (successes.go). The save fails the batch if
// another write changed the breaker since; run again, the batch locks it. Exact either way:
// the breaker counts what it would have under the lock. Only the writer goroutine uses it.
type breakersSeen struct {
	// data is each type's stored breaker as of the writer's last committed batch that read
	// it under its lock or saved it.
	data map[string]seenBreaker
	// off holds the types whose save without the lock found them changed, until when they
	// are locked again.
	off map[string]time.Time
}

// take returns typ's stored data to save against, and forgets it until the batch commits
// (Written): a batch run again after its save failed locks the breaker. ok is false when the
// writer does not know the data, or typ is off.
func (s *breakersSeen) take(typ string, now func() time.Time) (seen seenBreaker, ok bool) {
	if until, off := s.off[typ]; off {
		if now().Before(until) {
			return seenBreaker{}, false
		}
		delete(s.off, typ)
	}
	seen, ok = s.data[typ]
	delete(s.data, typ)
	return seen, ok
}

// written takes what batch bb stored, or, when it failed (err) or was run again, turns the
// types it saved without their lock off.
func (s *breakersSeen) written(bb *breakerBatch, err error, now func() time.Time) {
	if err != nil {
		s.missed(bb, now)
		return
	}
	if s.data == nil {
		s.data = make(map[string]seenBreaker)
	}
	for typ, seen := range bb.stored {
		s.data[typ] = seen
	}
}

// missed turns off the types bb saved without their lock.
func (s *breakersSeen) missed(bb *breakerBatch, now func() time.Time) {
	if len(bb.unlocked) == 0 {
		return
	}
	if s.off == nil {
		s.off = make(map[string]time.Time)
	}
	until := now().Add(seenOffFor)
	for typ := range bb.unlocked {
		s.off[typ] = until
	}
}

// breakerBatch holds the changes the ops of the writer's batch being written make to shared
// breakers, so that each breaker is locked, changed in memory by every op and stored once
// (flushBreakers), not once per op: a failing dependency's failures come in bursts. Only the
// writer goroutine uses it.
//
// Lock order. Brokers that serve one database lock rows of jobs, breakers and capped queues
// in their write transactions; two transactions that lock two rows in opposite orders deadlock
// (the database breaks that only after its deadlock timeout, stalling a writer's every op). So
// every write transaction locks in one order (package commit's writers, batches.Flush between):
// first the jobs its ops write, then the breakers, all at once and sorted by type
// (flushBreakers: the types the ops change and the round's probe types), then the capped queues, all at once and sorted by name (the lease's
// EnforceQueues, a queue change; the jobs a lease takes it skips when locked, so they never
// wait). The ops' apply therefore only record their breaker changes (changeBreaker); nothing
// in it reads a breaker before the flush, and nothing after the flush locks a breaker the flush
// did not. A batch that changes no breaker and leases no probe locks none.
type breakerBatch struct {
	tx      store.Tx
	probes  []string         // the types of the round's probe grants, locked with the changed ones
	pending []breakerPending // changes recorded by the ops, applied at the flush in op order
	flushed bool
	// locked are the types the flush locked, with the breaker read for a probe type no op
	// changed, until its lease takes it (nil after, and for the types the ops changed).
	locked map[string]*breaker.Shared
	// unlocked are the types the flush saves without locking them (breakersSeen), and stored
	// the breaker each type's row holds once the batch commits, for breakersSeen.
	unlocked map[string]*unlockedBreaker
	stored   map[string]seenBreaker
}

// unlockedBreaker is a breaker a batch saves without its lock: the data it saves against.
type unlockedBreaker struct {
	seen []byte
}

// breakerPending is a change an op records for the flush.
type breakerPending struct {
	typ string
	ch  *breakerChanges
	fn  func(sh *breaker.Shared) error
}

// batchBreakers starts keeping the breaker changes of batch's ops written in tx.
func (b *Broker) batchBreakers(tx store.Tx, batch []commit.Op) { b.mode.breakers().batch(tx, batch) }

func (h breakersInStore) batch(tx store.Tx, batch []commit.Op) {
	b := h.b
	// A batch begun again in the same write (the storage retries run it again) after it saved
	// a breaker without its lock: that save may have been what failed.
	b.writing.seen.missed(&b.writing.breakerBatch, b.now)
	bb := breakerBatch{tx: tx}
	for _, o := range batch {
		if p, ok := o.(prober); ok {
			bb.probes = append(bb.probes, p.probeTypes()...)
		}
	}
	b.writing.breakerBatch = bb
}

// flushBreakers locks, in tx, the breakers the batch changes and its round probes, sorted by
// type (see breakerBatch for why), applies the ops' changes and stores them. A type the ops
// change and no probe needs, whose stored data the writer knows, is not locked but saved if
// still stored so (breakersSeen). What reads the stored breakers (a lease) or locks a queue
// comes after. A second call does nothing.
func (b *Broker) flushBreakers(tx store.Tx) error {
	bb := &b.writing.breakerBatch
	if bb.tx != tx || bb.flushed {
		return nil
	}
	bb.flushed = true
	if len(bb.pending) == 0 && len(bb.probes) == 0 {
		return nil
	}
	types := slices.Clone(bb.probes)
	for _, c := range bb.pending {
		types = append(types, c.typ)
	}
	slices.Sort(types)
	types = slices.Compact(types)
	if err := b.readBatchBreakers(tx, bb, types); err != nil {
		return err
	}
	changed := make(map[string]bool, len(bb.pending))
	for _, c := range bb.pending {
		if !changed[c.typ] { // the successes held before the batch's changes (successes.go)
			b.writing.successes.fold(c.typ, bb.locked[c.typ])
		}
		changed[c.typ] = true
	}
	for _, c := range bb.pending {
		sh := bb.locked[c.typ]
		if err := c.fn(sh); err != nil {
			return err
		}
		*c.ch = append(*c.ch, sh)
	}
	bb.pending = nil
	for _, typ := range types {
		if !changed[typ] {
			continue // a probe type: stored if its lease changes it (changeBreaker)
		}
		sh, un := bb.locked[typ], bb.unlocked[typ]
		// A breaker not locked is saved even unchanged: the save checks that what the ops
		// changed it from is still stored.
		if sh.Changed() || un != nil {
			if err := b.saveBreaker(tx, sh, un); err != nil {
				return err
			}
		}
		// The ops' callers read sh once committed, some off the writer goroutine: a probe's
		// lease of the type reads it again rather than share it.
		bb.locked[typ] = nil
	}
	return nil
}

// readBatchBreakers reads, in tx, the breakers of types (sorted) into bb.locked: each locked,
// or, for a type no probe needs whose stored breaker the writer knows (breakersSeen), built
// from it and marked in bb.unlocked.
func (b *Broker) readBatchBreakers(tx store.Tx, bb *breakerBatch, types []string) error {
	bb.locked = make(map[string]*breaker.Shared, len(types))
	bb.stored = make(map[string]seenBreaker, len(types))
	for _, typ := range types {
		var known seenBreaker
		ok := false
		if !slices.Contains(bb.probes, typ) { // a probe's lease reads the breaker under its lock
			known, ok = b.writing.seen.take(typ, b.now)
		}
		if !ok {
			sh, read, err := b.lockBreakerData(tx, typ)
			if err != nil {
				return err
			}
			bb.locked[typ], bb.stored[typ] = sh, read
			continue
		}
		if b.writing.lockingBreaker != nil { // its row is locked by its save, at commit
			b.writing.lockingBreaker(typ, false)
			b.writing.lockingBreaker(typ, true)
		}
		sh, err := b.breakers.Shared(typ, &known.saved) // not decoded again: copied
		if err != nil {
			return err
		}
		if bb.unlocked == nil {
			bb.unlocked = make(map[string]*unlockedBreaker)
		}
		bb.locked[typ], bb.unlocked[typ] = sh, &unlockedBreaker{seen: known.data}
	}
	return nil
}

// changeBreaker applies fn to typ's shared breaker in tx. In a writer's batch the change is
// recorded and made by flushBreakers, which adds the breaker to ch then; once the batch's
// breakers are flushed (a probe's lease), typ must be among those the flush locked. A write
// outside a batch changes and stores it at once.
func (b *Broker) changeBreaker(tx store.Tx, ch *breakerChanges, typ string, fn func(sh *breaker.Shared) error) error {
	var sh *breaker.Shared
	bb := &b.writing.breakerBatch
	if bb.tx == tx {
		if !bb.flushed {
			bb.pending = append(bb.pending, breakerPending{typ: typ, ch: ch, fn: fn})
			return nil
		}
		read, ok := bb.locked[typ]
		if !ok {
			return fmt.Errorf("breaker %q locked after the batch's breakers: it would break the lock order", typ)
		}
		// The breaker the flush read is used once: a second use re-reads what tx stored, as
		// a use that failed (an isolated lease) may have changed it in memory only.
		sh, bb.locked[typ] = read, nil
	}
	if sh == nil {
		var err error
		if sh, err = b.lockBreaker(tx, typ); err != nil { // in a batch, tx holds it already
			return err
		}
	}
	if err := fn(sh); err != nil {
		return err
	}
	if err := b.storeBreaker(tx, sh); err != nil {
		return err
	}
	*ch = append(*ch, sh)
	return nil
}

// settleShared ends, in tx, the shared breaker permit of job jobID's lease (of type typ) the way how
// says: tx holds the write that ended the lease, for the job's attempt number attempt (it names
// a failure, which the breaker counts once however many writes apply it: see
// breaker.Shared.Failure). known is the permit the broker kept with the lease (zero if it kept
// none). Only a probe's permit is trusted as kept: any other permit was
// granted while CLOSED, and the stored breaker says whether that is still so (see
// breaker.Shared.Permit), whatever a cache knew of the generation.
//
// A release or a success of a permit known not to be a probe needs no database work here, nor,
// in count mode, does a failure of a kind the breaker does not count. In ratio mode every
// failure is a call in the breaker's sliding window, applied once per type and batch of the
// writer (flushBreakers); so is every success, but held until the type's next breaker write
// (successes.go). msg is a failure's message, kept among the breaker's last failures.
func (b *Broker) settleShared(tx store.Tx, ch *breakerChanges, typ string, jobID int64, attempt int,
	known breaker.Permit, how permitEnd, kind breaker.FailureKind, msg string) error {
	return b.mode.breakers().settleInWrite(tx, ch, typ, jobID, attempt, known, how, kind, msg)
}

func (h breakersInStore) settleInWrite(tx store.Tx, ch *breakerChanges, typ string, jobID int64, attempt int,
	known breaker.Permit, how permitEnd, kind breaker.FailureKind, msg string) error {
	b := h.b
	cfg := b.breakers.ConfigFor(typ)
	if cfg.Disabled {
		return nil
	}
	if known.Generation != 0 && !known.IsProbe() &&
		(how != permitFailed || cfg.Mode != breaker.ModeRatio && !cfg.Counts(kind)) {
		return nil // a success of a ratio-mode breaker is counted once committed (successes.go)
	}
	if !known.IsProbe() {
		known = breaker.Permit{}
	}
	return b.changeBreaker(tx, ch, typ, func(sh *breaker.Shared) error {
		p := sh.Permit(jobID, known)
		switch how {
		case permitReleased:
			sh.Release(p)
		case permitSucceeded:
			sh.Success(p)
		case permitFailed:
			sh.FailureNote(p, breaker.Note{Job: jobID, Kind: kind, Message: msg}, breaker.Attempt{Job: jobID, Number: attempt})
		}
		return nil
	})
}

// leaseProbes leases, in tx, the jobs of a probe grant: as many as the stored breaker has free
// probe slots, each taking one for its job. The grant's permits are then the leased jobs', in
// order.
func (b *Broker) leaseProbes(tx store.Tx, ch *breakerChanges, g *grant) error {
	typ := g.params.Types[0]
	g.leased, g.permits = nil, nil
	return b.changeBreaker(tx, ch, typ, func(sh *breaker.Shared) error {
		limit := g.params.Limit
		if a := sh.Allowance(); a != breaker.Unlimited {
			limit = min(limit, a)
		}
		if limit <= 0 {
			return nil
		}
		p := g.params
		p.Limit = 1 << (bits.Len(uint(limit)) - 1)
		jobs, err := tx.JobLease(&p)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			permit, ok := sh.Acquire(j.ID, b.mode.id())
			if !ok {
				return fmt.Errorf("probe permit for job %d refused with %d slots free", j.ID, limit)
			}
			g.permits = append(g.permits, permit)
		}
		g.leased = jobs
		return nil
	})
}

// applyBreakerChanges gives the states a committed transaction read or stored to the cache,
// reports the transitions it made, and asks for a dispatch round if one moved a breaker. Call
// it without b.mu held.
func (b *Broker) applyBreakerChanges(ch breakerChanges) {
	if len(ch) == 0 {
		return
	}
	moved := false
	for _, sh := range ch {
		if err := b.breakers.Load(sh.Saved()); err != nil {
			b.log.Error("cache breaker state", "err", err)
		}
		for _, t := range sh.TakeTransitions() { // ops of one batch may share sh
			b.reportBreakerTransition(t)
		}
		moved = moved || sh.Moved()
	}
	if moved {
		b.signal()
	}
}

// refreshBreakers reads every stored breaker into the cache: at start, when another broker
// changed one (store.EventBreaker), after events may have been lost (store.EventResync), and
// at every sweep. A dispatch round follows if a breaker's state, generation or probes changed.
func (b *Broker) refreshBreakers(ctx context.Context) error {
	recs, err := b.st.BreakerLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load breakers: %w", err)
	}
	return b.cacheBreakers(recs)
}

// cacheBreakers loads stored breakers into the cache, and asks for a dispatch round if that
// changes what dispatch lets through.
func (b *Broker) cacheBreakers(recs []store.BreakerRecord) error {
	states, err := decodeBreakers(recs)
	if err != nil {
		return err
	}
	before := b.breakers.List()
	if err := b.breakers.Load(states...); err != nil {
		return err
	}
	if !sameDispatch(before, b.breakers.List()) {
		b.signal()
	}
	return nil
}

// breakersStale asks for the cache of shared breakers to be refreshed soon (breakerKeeper).
func (b *Broker) breakersStale() { b.svc.breakerStore.breakersStale() }

// sameDispatch reports whether two listings of breakers let the same jobs through.
func sameDispatch(x, y []breaker.Info) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Type != y[i].Type || x[i].State != y[i].State || x[i].Generation != y[i].Generation ||
			x[i].ProbesInFlight != y[i].ProbesInFlight {
			return false
		}
	}
	return true
}

// adminShared resets or forces typ's shared breaker in a transaction of its own.
func (b *Broker) adminShared(ctx context.Context, typ string, ev store.AuditEvent, fn func(sh *breaker.Shared) error) (breaker.Info, error) {
	if typ == "" {
		return breaker.Info{}, breaker.ErrEmptyType
	}
	if b.breakers.ConfigFor(typ).Disabled {
		return breaker.Info{}, fmt.Errorf("%w: %q", breaker.ErrDisabled, typ)
	}
	var ch breakerChanges
	err := b.do(b.ctx, "breaker_admin", func(tx store.Tx) error {
		ch.reset()
		if err := b.changeBreaker(tx, &ch, typ, fn); err != nil {
			return err
		}
		e := ev
		return b.audit(ctx, tx, &e)
	})
	if err != nil {
		return breaker.Info{}, err
	}
	b.applyBreakerChanges(ch)
	return ch[len(ch)-1].Info(), nil
}

// heldProbe is a lease whose job holds a probe slot, to release in the write that hands the
// job back.
type heldProbe struct {
	ref    job.LeaseRef
	typ    string
	permit breaker.Permit
}

// releaseHeld hands the jobs of held back to PENDING in tx (each fenced by its lease), with the
// shared probe slots they hold, and reports which it released; ch gets the breakers changed.
func (b *Broker) releaseHeld(tx store.Tx, ch *breakerChanges, held []heldProbe) ([]bool, error) {
	ch.reset()
	refs := make([]job.LeaseRef, len(held))
	for i, h := range held {
		refs[i] = h.ref
	}
	released, err := tx.JobReleaseMany(refs)
	if err != nil {
		return nil, err
	}
	tx.Publish(readyEvent)
	return released, b.releaseProbes(tx, ch, held, func(i int) bool { return released[i] })
}

// heldJobs are the ids of hs's jobs, which releaseHeld writes (commit.JobWriter).
func heldJobs(hs []heldProbe) []int64 {
	ids := make([]int64, len(hs))
	for i, h := range hs {
		ids[i] = h.ref.JobID
	}
	return ids
}

// leaseJobs are the ids of refs' jobs (commit.JobWriter).
func leaseJobs(refs []job.LeaseRef) []int64 {
	ids := make([]int64, len(refs))
	for i, r := range refs {
		ids[i] = r.JobID
	}
	return ids
}

// releaseProbes releases, in tx, the probe slots of the jobs among hs that tx handed back
// (released[i] says whether hs[i]'s was).
func (b *Broker) releaseProbes(tx store.Tx, ch *breakerChanges, hs []heldProbe, released func(i int) bool) error {
	for i, h := range hs {
		if !h.permit.IsProbe() || !released(i) {
			continue
		}
		if err := b.settleShared(tx, ch, h.typ, h.ref.JobID, 0, h.permit, permitReleased, 0, ""); err != nil {
			return err
		}
	}
	return nil
}

// keptPermit is the breaker permit this broker keeps with lease ref, zero if it keeps none.
func (b *Broker) keptPermit(ref job.LeaseRef) breaker.Permit {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.leaseLocked(ref); l != nil {
		return l.permit
	}
	return breaker.Permit{}
}
