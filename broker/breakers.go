package broker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/commit"
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

// breakerHome is where the breakers' states live, and so how a lease's permit is settled and an
// operator's change applied: in the broker's memory (breakersInMemory), or in the database,
// shared by the brokers serving it (breakersInStore, sharedbreakers.go). The broker's mode
// picks one.
type breakerHome interface {
	// shared reports whether the states live in the database, the broker's set a cache.
	shared() bool
	// release gives back a permit whose job was never handed out.
	release(p breaker.Permit)
	// settleLocked settles the permit of lease l, which ends the way how says, with b.mu held.
	settleLocked(l *lease, how permitEnd, kind breaker.FailureKind)
	// restore loads the stored states before the first dispatch.
	restore(ctx context.Context) error
	// list reads every breaker.
	list() []breaker.Info
	// change applies an operator's reset or force, recorded as ev.
	change(ctx context.Context, typ string, ev store.AuditEvent, mem func() (breaker.Info, error),
		shared func(sh *breaker.Shared) error) (breaker.Info, error)
	// swept runs after every sweep.
	swept(ctx context.Context)
	// batch begins the writer's batch of ops in tx (see breakerBatch).
	batch(tx store.Tx, ops []commit.Op)
	// settlesInWrite says how the permit p of a lease of typ is settled by the write that
	// ends the lease (settleInWrite), if it is, rather than in memory once it committed.
	settlesInWrite(p breaker.Permit, typ string) writeSettles
	// settleInWrite settles, in tx, the permit of job jobID's lease that tx ends (see
	// Broker.settleShared).
	settleInWrite(tx store.Tx, ch *breakerChanges, typ string, jobID int64, attempt int,
		known breaker.Permit, how permitEnd, kind breaker.FailureKind, msg string) error
	// leaseProbes leases the jobs of g, a grant of half-open probes, in tx when the probe
	// slots live in the database; handled is false when they do not, and g's jobs are leased
	// as any others.
	leaseProbes(tx store.Tx, ch *breakerChanges, g *grant) (handled bool, err error)
	// probesNotLeased forgets the permits of g, a grant of probes whose lease failed.
	probesNotLeased(g *grant)
	// takeProbePermitsLocked takes the permits of g, a grant of probes just leased, from the
	// broker's memory when they live there, with b.mu held.
	takeProbePermitsLocked(g *grant)
}

// breakersInMemory keeps a lone broker's breakers in its memory; breakerKeeper stores them.
type breakersInMemory struct{ b *Broker }

func (breakersInMemory) shared() bool                { return false }
func (h breakersInMemory) release(p breaker.Permit)  { h.b.breakers.Release(p) }
func (breakersInMemory) swept(context.Context)       {}
func (breakersInMemory) batch(store.Tx, []commit.Op) {}

func (breakersInMemory) settlesInWrite(breaker.Permit, string) writeSettles { return settlesAfter }

// leaseProbes leaves probes to the ordinary lease: their slots are taken from memory once
// leased (takeProbePermitsLocked).
func (breakersInMemory) leaseProbes(store.Tx, *breakerChanges, *grant) (bool, error) {
	return false, nil
}

// probesNotLeased keeps the permits: none was taken from memory yet.
func (breakersInMemory) probesNotLeased(*grant) {}

func (h breakersInMemory) takeProbePermitsLocked(g *grant) { h.b.takeProbePermitsLocked(g) }

// settleInWrite does nothing: a broker's own breakers settle in memory, once the write commits.
func (breakersInMemory) settleInWrite(store.Tx, *breakerChanges, string, int64, int, breaker.Permit,
	permitEnd, breaker.FailureKind, string) error {
	return nil
}
func (h breakersInMemory) list() []breaker.Info { return h.b.breakers.List() }

func (h breakersInMemory) settleLocked(l *lease, how permitEnd, kind breaker.FailureKind) {
	b := h.b
	switch how {
	case permitReleased:
		b.breakers.Release(l.permit)
	case permitSucceeded:
		b.breakers.Success(l.permit)
	case permitFailed:
		b.breakers.FailureNote(l.permit, breaker.Note{Job: l.ref.JobID, Kind: kind, Message: l.failMsg})
		if l.permit.Generation != 0 { // a permit no breaker issued counts nowhere
			b.svc.breakerStore.noteFailure(l.job.Type)
		}
	}
}

func (h breakersInMemory) restore(ctx context.Context) error {
	saved, err := h.b.loadBreakers(ctx)
	if err != nil {
		return err
	}
	if err := h.b.breakers.Restore(saved); err != nil {
		return fmt.Errorf("restore breakers: %w", err)
	}
	return nil
}

// change applies the change in memory and records it right after, in a write of its own.
func (h breakersInMemory) change(ctx context.Context, _ string, ev store.AuditEvent, mem func() (breaker.Info, error),
	_ func(sh *breaker.Shared) error) (breaker.Info, error) {
	info, err := mem()
	h.b.signal()
	if err != nil {
		return info, err
	}
	return info, h.b.auditAfter(ctx, ev)
}

// permitRelease gives back a permit whose job was never handed out. A shared breaker's probe
// slot is released by the write that hands the job back instead.
func (b *Broker) permitRelease(p breaker.Permit) { b.mode.breakers().release(p) }

// endLeaseLocked forgets a lease, freeing its capacity slot, and settles its breaker permit
// exactly once: a lease already ended is left alone. Shared breakers were settled by the write
// that ended the lease (settleShared).
func (b *Broker) endLeaseLocked(l *lease, how permitEnd, kind breaker.FailureKind) {
	if b.table.leases[l.ref.JobID] != l {
		return
	}
	delete(b.table.leases, l.ref.JobID)
	if l.sess != nil && l.sess.held[l.ref.JobID] == l {
		delete(l.sess.held, l.ref.JobID)
	}
	b.mode.breakers().settleLocked(l, how, kind)
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
	b.svc.breakerStore.queue([]breaker.Saved{t.Saved})
	b.signal()
}

// reportBreakerTransition logs a transition and counts it.
func (b *Broker) reportBreakerTransition(t breaker.Transition) {
	// Names, not numbers, whatever the log format: JSON logs would print the raw ints.
	b.log.Info("circuit breaker transition", "type", t.Type, "from", t.From.String(), "to", t.To.String(),
		"reason", t.Reason.String(), "generation", t.Generation)
	b.obs.BreakerTransition(t.Type, t.From, t.To, t.Reason)
}

// restoreBreakers loads stored breaker states before the first dispatch.
func (b *Broker) restoreBreakers(ctx context.Context) error { return b.mode.breakers().restore(ctx) }

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
func (b *Broker) Breakers() []breaker.Info { return b.mode.breakers().list() }

// ResetBreaker closes a type's breaker and forgets its failures, on every broker sharing it.
// ctx's actor is recorded as having done it: in the write that stores a shared breaker, and
// right after the change for a breaker kept in memory.
func (b *Broker) ResetBreaker(ctx context.Context, jobType string) (breaker.Info, error) {
	ev := store.AuditEvent{Action: AuditBreakerReset, Target: jobType}
	return b.mode.breakers().change(ctx, jobType, ev, func() (breaker.Info, error) { return b.breakers.Reset(jobType) },
		(*breaker.Shared).Reset)
}

// ForceBreaker puts a type's breaker in a state, on every broker sharing it, and records ctx's
// actor as having done it, as ResetBreaker does.
func (b *Broker) ForceBreaker(ctx context.Context, jobType string, st breaker.State) (breaker.Info, error) {
	if !st.Valid() {
		return breaker.Info{}, fmt.Errorf("%w: %v", breaker.ErrInvalidState, st)
	}
	ev := store.AuditEvent{Action: AuditBreakerForce, Target: jobType, Detail: "state=" + st.String()}
	return b.mode.breakers().change(ctx, jobType, ev, func() (breaker.Info, error) { return b.breakers.Force(jobType, st) },
		func(sh *breaker.Shared) error { return sh.Force(st) })
}
