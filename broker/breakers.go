package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// permitEnd says how a lease's breaker permit is settled when the lease ends.
type permitEnd int

const (
	// permitReleased: user code never started, or the job was cancelled: neither success
	// nor failure, and a probe slot is freed.
	permitReleased permitEnd = iota
	permitSucceeded
	permitFailed
)

// permitRelease gives back a permit whose job was never handed out. A shared breaker's probe
// slot is released by the write that hands the job back instead.
func (b *Broker) permitRelease(p breaker.Permit) {
	if !b.sharedBreakers() {
		b.breakers.Release(p)
	}
}

// endLeaseLocked forgets a lease, freeing its capacity slot, and settles its breaker permit
// exactly once: a lease already ended is left alone. Shared breakers were settled by the write
// that ended the lease (settleShared).
func (b *Broker) endLeaseLocked(l *lease, how permitEnd, kind breaker.FailureKind) {
	if b.leases[l.ref.JobID] != l {
		return
	}
	delete(b.leases, l.ref.JobID)
	if l.sess != nil && l.sess.held[l.ref.JobID] == l {
		delete(l.sess.held, l.ref.JobID)
	}
	if b.sharedBreakers() {
		return
	}
	switch how {
	case permitReleased:
		b.breakers.Release(l.permit)
	case permitSucceeded:
		b.breakers.Success(l.permit)
	case permitFailed:
		b.breakers.FailureNote(l.permit, breaker.Note{Job: l.ref.JobID, Kind: kind, Message: l.failMsg})
		if l.permit.Generation != 0 { // a permit no breaker issued counts nowhere
			b.noteBreakerFailure(l.job.Type)
		}
	}
}

// breakerSaveDelay is how long a breaker's failures counted while CLOSED may wait to be
// stored: a crash forgets at most this much of them. Saving them together, not one write per
// failed attempt, keeps the writes few exactly when a dependency is failing.
const breakerSaveDelay = time.Second

// noteBreakerFailure schedules a save of typ's breaker within breakerSaveDelay.
func (b *Broker) noteBreakerFailure(typ string) {
	b.breakerMu.Lock()
	defer b.breakerMu.Unlock()
	if b.breakerStopped {
		return
	}
	b.breakerFailed[typ] = true
	if b.breakerSave == nil {
		b.breakerSave = b.clk.AfterFunc(breakerSaveDelay, b.saveFailedBreakers)
	}
}

// saveFailedBreakers queues the current state of every breaker that counted a failure since
// it was last saved.
func (b *Broker) saveFailedBreakers() {
	b.breakerMu.Lock()
	failed := b.breakerFailed
	b.breakerFailed = make(map[string]bool)
	b.breakerSave = nil
	b.breakerMu.Unlock()
	snap := b.breakers.Snapshot()
	b.queueBreakerSaves(slices.DeleteFunc(snap, func(s breaker.Saved) bool { return !failed[s.Type] }))
}

// queueBreakerSaves hands breaker states to persistBreakersLoop. A state replaces any older
// one of its type still waiting.
func (b *Broker) queueBreakerSaves(states []breaker.Saved) {
	if len(states) == 0 {
		return
	}
	b.breakerMu.Lock()
	for _, s := range states {
		b.breakerPending[s.Type] = s
	}
	b.breakerMu.Unlock()
	select {
	case b.breakerDirty <- struct{}{}:
	default:
	}
}

// breakerKind maps a failure to the kind a breaker counts.
func breakerKind(k job.FailureKind) breaker.FailureKind {
	if k == job.KindFatal {
		return breaker.Fatal
	}
	return breaker.Transient
}

// onBreakerTransition logs a transition and queues its state for storage. It may run while
// the broker's lock is held, so it only records and signals.
func (b *Broker) onBreakerTransition(t breaker.Transition) {
	b.reportBreakerTransition(t)
	b.queueBreakerSaves([]breaker.Saved{t.Saved})
	b.signal()
}

// reportBreakerTransition logs a transition and counts it.
func (b *Broker) reportBreakerTransition(t breaker.Transition) {
	// Names, not numbers, whatever the log format: JSON logs would print the raw ints.
	b.log.Info("circuit breaker transition", "type", t.Type, "from", t.From.String(), "to", t.To.String(),
		"reason", t.Reason.String(), "generation", t.Generation)
	b.obs.BreakerTransition(t.Type, t.From, t.To, t.Reason)
}

// persistBreakersLoop stores breaker states as they change, so that a restart does not slam
// a dependency that was just found broken.
//
// Transitions are stored as they happen. Failures counted while CLOSED change no state; they
// are stored together, at most breakerSaveDelay after the first of them (noteBreakerFailure),
// and at shutdown, when every breaker's snapshot is written. A crash therefore forgets at most
// the last second of them.
func (b *Broker) persistBreakersLoop() {
	defer b.stopped.Done()
	for {
		select {
		case <-b.breakerDirty:
			b.persistBreakers()
		case <-b.breakerStale:
			if err := b.refreshBreakers(b.ctx); err != nil {
				b.log.Warn("refresh shared breakers", "err", err)
			}
		case <-b.stop:
			if !b.sharedBreakers() { // a cache's snapshot would overwrite newer stored states
				b.queueBreakerSaves(b.breakers.Snapshot())
			}
			b.persistBreakers()
			return
		}
	}
}

func (b *Broker) persistBreakers() {
	b.breakerMu.Lock()
	pending := b.breakerPending
	b.breakerPending = make(map[string]breaker.Saved)
	b.breakerMu.Unlock()
	if len(pending) == 0 {
		return
	}
	recs := make([]store.BreakerRecord, 0, len(pending))
	for _, saved := range pending {
		rec, err := b.encodeBreaker(saved)
		if err != nil {
			b.log.Error("store breaker state", "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	// Straight to the store: the writer may already be stopped at shutdown.
	err := b.st.Write(context.WithoutCancel(b.ctx), "breaker_save", func(tx store.Tx) error {
		for _, r := range recs {
			if err := tx.BreakerSave(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.log.Error("store breaker states", "err", err)
	}
}

// restoreBreakers loads stored breaker states before the first dispatch.
func (b *Broker) restoreBreakers(ctx context.Context) error {
	if b.sharedBreakers() {
		if err := b.unshutDisabledBreakers(ctx); err != nil {
			return err
		}
		return b.refreshBreakers(ctx)
	}
	saved, err := b.loadBreakers(ctx)
	if err != nil {
		return err
	}
	if err := b.breakers.Restore(saved); err != nil {
		return fmt.Errorf("restore breakers: %w", err)
	}
	return nil
}

// loadBreakers reads every stored breaker state.
func (b *Broker) loadBreakers(ctx context.Context) ([]breaker.Saved, error) {
	recs, err := b.st.BreakerLoadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("load breakers: %w", err)
	}
	return decodeBreakers(recs)
}

// decodeBreakers reads stored breakers' documents.
func decodeBreakers(recs []store.BreakerRecord) ([]breaker.Saved, error) {
	saved := make([]breaker.Saved, 0, len(recs))
	for _, r := range recs {
		s, err := decodeBreaker(r.Type, r.Data)
		if err != nil {
			return nil, err
		}
		saved = append(saved, s)
	}
	return saved, nil
}

// unshutDisabledBreakers clears the shut mark of the stored breakers that this broker's
// configuration disables: a breaker disabled after it opened is never stored again, and the
// leases' statements would go on holding its type back (JobLeaseParams.ExcludeShut).
func (b *Broker) unshutDisabledBreakers(ctx context.Context) error {
	recs, err := b.st.BreakerLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load breakers: %w", err)
	}
	var clear []store.BreakerRecord
	for _, r := range recs {
		if r.Shut && b.breakers.ConfigFor(r.Type).Disabled {
			clear = append(clear, r)
		}
	}
	if len(clear) == 0 {
		return nil
	}
	return b.st.Write(ctx, "breaker_save", func(tx store.Tx) error {
		for _, r := range clear {
			data, err := tx.BreakerLock(r.Type, r.Data) // the document as it is now
			if err != nil {
				return err
			}
			if err := tx.BreakerSave(store.BreakerRecord{Type: r.Type, Data: data}); err != nil {
				return err
			}
		}
		return nil
	})
}

// encodeBreaker is the stored record of a breaker's state: its document, and whether it holds
// its type back from every lease but its probes (Shut, which a lease's statement reads:
// JobLeaseParams.ExcludeShut), as every state but CLOSED does unless the breaker is disabled.
func (b *Broker) encodeBreaker(saved breaker.Saved) (store.BreakerRecord, error) {
	data, err := json.Marshal(saved)
	if err != nil {
		return store.BreakerRecord{}, fmt.Errorf("encode breaker state of %q: %w", saved.Type, err)
	}
	shut := saved.State != breaker.StateClosed && !b.breakers.ConfigFor(saved.Type).Disabled
	return store.BreakerRecord{Type: saved.Type, Data: data, Shut: shut}, nil
}

// decodeBreaker reads the stored document of typ's breaker.
func decodeBreaker(typ string, data []byte) (breaker.Saved, error) {
	var s breaker.Saved
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("decode breaker state of %q: %w", typ, err)
	}
	return s, nil
}

// Breakers lists every circuit breaker. Shared breakers are read from the database first, so
// every broker lists the same states.
func (b *Broker) Breakers() []breaker.Info {
	if b.sharedBreakers() {
		if err := b.refreshBreakers(b.ctx); err != nil {
			b.log.Warn("read shared breakers; listing the cached states", "err", err)
		}
	}
	return b.breakers.List()
}

// ResetBreaker closes a type's breaker and forgets its failures, on every broker sharing it.
// ctx's actor is recorded as having done it: in the write that stores a shared breaker, and
// right after the change for a breaker kept in memory.
func (b *Broker) ResetBreaker(ctx context.Context, jobType string) (breaker.Info, error) {
	ev := store.AuditEvent{Action: AuditBreakerReset, Target: jobType}
	if b.sharedBreakers() {
		return b.adminShared(ctx, jobType, ev, (*breaker.Shared).Reset)
	}
	info, err := b.breakers.Reset(jobType)
	b.signal()
	if err != nil {
		return info, err
	}
	return info, b.auditAfter(ctx, ev)
}

// ForceBreaker puts a type's breaker in a state, on every broker sharing it, and records ctx's
// actor as having done it, as ResetBreaker does.
func (b *Broker) ForceBreaker(ctx context.Context, jobType string, st breaker.State) (breaker.Info, error) {
	ev := store.AuditEvent{Action: AuditBreakerForce, Target: jobType, Detail: "state=" + st.String()}
	if b.sharedBreakers() {
		if !st.Valid() {
			return breaker.Info{}, fmt.Errorf("%w: %v", breaker.ErrInvalidState, st)
		}
		return b.adminShared(ctx, jobType, ev, func(sh *breaker.Shared) error { return sh.Force(st) })
	}
	info, err := b.breakers.Force(jobType, st)
	b.signal()
	if err != nil {
		return info, err
	}
	return info, b.auditAfter(ctx, ev)
}
