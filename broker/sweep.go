package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/triage"
)

// sweepBatch caps how many expired leases one sweep handles; the next sweep takes the rest.
const sweepBatch = 500

// sweepTick sweeps, and checks what a sweep interval may have let lapse. The sweep service runs
// it every SweepInterval.
func (b *Broker) sweepTick() {
	b.Sweep()
	b.mode.breakers().swept(b.ctx)
	b.mu.Lock()
	b.pruneRacedCancelsLocked()
	// A worker whose stream has had messages waiting longer than a lease lasts has stopped
	// reading: it could not heartbeat either. Its stream is closed (see outbox).
	now := b.now()
	for _, s := range b.table.sessions {
		s.out.checkStalled(now, b.cfg.LeaseDuration)
	}
	b.mu.Unlock()
	b.countPausedBacklog()
}

// expired is what a sweep did to one job.
type expired struct {
	j        *job.Job
	running  bool
	cause    triage.Cause
	decision triage.Decision
	params   *store.JobFinishParams
	applied  bool
	// how and kind settle the lease's breaker permit: released for a job that never started,
	// failed (LeaseExpired or Timeout) for a running one.
	how  permitEnd
	kind breaker.FailureKind
}

// Sweep ends leases that ran out and attempts that outlived their timeout (in a cluster, the
// leader does this for every broker, and each broker drops the leases it held that the leader
// ended: see dropLostLeasesLocked):
//   - a LEASED job goes back to PENDING with no attempt spent;
//   - a RUNNING job whose lease ran out is a transient failure, LEASE_EXPIRED;
//   - a RUNNING job past its attempt timeout is a transient failure, TIMEOUT, and its worker
//     is told to cancel it.
//
// It runs every SweepInterval; tests call it after moving a fake clock.
func (b *Broker) Sweep() {
	now := b.now()
	if !b.mode.sweep(now) {
		return
	}
	b.expire(now, func(tx store.Tx) ([]*job.Job, error) { return tx.JobHeldExpired(now, sweepBatch) })
}

// expire ends, as of now, the leases of the held jobs list reads in the sweep's transaction,
// and returns what it did to each (nothing if the transaction failed). The store decides first;
// memory follows only what committed.
func (b *Broker) expire(now time.Time, list func(tx store.Tx) ([]*job.Job, error)) []*expired {
	outs, ch, err := b.expireStored(now, list)
	if err != nil {
		if !errors.Is(err, ErrShuttingDown) {
			b.log.Error("sweep expired leases", "err", err)
		}
		return nil
	}
	b.applyBreakerChanges(ch)
	if len(outs) == 0 {
		return nil
	}
	b.mu.Lock()
	for _, e := range outs {
		if e.applied {
			b.endExpiredLocked(now, e)
		}
	}
	b.mu.Unlock()
	for _, e := range outs {
		b.jobsChanged(changeAny, e.j.ID)
	}
	b.signal()
	return outs
}

// expireStored ends in one transaction the leases of the held jobs list reads, and returns what
// it did to each with the breaker changes to apply once it committed (nothing if it failed).
func (b *Broker) expireStored(now time.Time, list func(tx store.Tx) ([]*job.Job, error)) ([]*expired, breakerChanges, error) {
	var outs []*expired
	var ch breakerChanges
	err := b.do(b.ctx, "sweep", func(tx store.Tx) error {
		outs = outs[:0]
		ch.reset()
		jobs, err := list(tx)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			e, err := b.expireHeld(tx, &ch, j, now)
			if err != nil {
				return err
			}
			outs = append(outs, e)
		}
		return nil
	})
	if err != nil {
		// The transaction may still be running (the broker is stopping): outs and ch are its.
		return nil, nil, err
	}
	return outs, ch, nil
}

// endExpiredLocked ends in memory the lease of a job whose expiry committed: a job that never
// started just gives its lease back; a running one failed, so its attempt is counted and logged,
// its worker told to stop, and its retry scheduled. b.mu is held.
func (b *Broker) endExpiredLocked(now time.Time, e *expired) {
	ref := job.LeaseRef{JobID: e.j.ID, Token: e.j.LeaseToken}
	l := b.leaseLocked(ref)
	if !e.running || e.cause == triage.LeaseExpired {
		b.obs.LeaseExpired(e.j.Queue)
	}
	if !e.running {
		if l != nil {
			b.endLeaseLocked(l, e.how, e.kind)
		}
		return
	}
	reason, cause := CancelLeaseLost, CauseLeaseExpired
	if e.cause == triage.Timeout {
		reason, cause = CancelTimeout, CauseTimeout
	}
	b.obs.AttemptEnded(e.j.Queue, e.j.Type, AttemptEnd{Cause: cause, Verdict: e.decision.Verdict,
		Dead: e.decision.Reason, Duration: now.Sub(e.j.StartedAt)})
	b.log.Info("attempt failed without a result", "job", e.j.ID, "type", e.j.Type,
		"outcome", e.params.Attempt.Outcome, "decision", e.decision.Verdict)
	if l != nil {
		sess := l.sess
		b.endLeaseLocked(l, e.how, e.kind)
		if sess != nil {
			sess.out.push(Cancel{Ref: ref, Reason: reason})
		}
	}
	if e.params.State == job.StateScheduled {
		b.schedule(e.params.RunAt)
	}
}

// expireHeld ends, in tx, the lease of j, which JobHeldExpired listed at now as run out or past
// its attempt timeout. The store reports the write applied also when j's lease was ended the
// same way already by a write that committed after j was read (a result, another sweep); the
// breaker counts such a failure once (settleShared).
func (b *Broker) expireHeld(tx store.Tx, ch *breakerChanges, j *job.Job, now time.Time) (*expired, error) {
	ref := job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
	e := &expired{j: j, running: j.State == job.StateRunning, how: permitReleased}
	if err := b.endExpired(tx, e, ref, now); err != nil {
		return nil, err
	}
	if e.applied {
		attempt := 0 // a job that never started spent no attempt
		if e.running {
			attempt = j.Attempts
		}
		if err := b.settleShared(tx, ch, j.Type, j.ID, attempt, b.keptPermit(ref), e.how, e.kind, ""); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// endExpired writes, in tx, the end of e's lease: a job that never started goes back to
// PENDING, a running one's attempt fails.
func (b *Broker) endExpired(tx store.Tx, e *expired, ref job.LeaseRef, now time.Time) error {
	j := e.j
	var err error
	if !e.running {
		if e.applied, err = tx.JobRelease(ref); err != nil {
			return err
		}
		tx.Publish(readyEvent)
		return nil
	}
	a := job.Attempt{Number: j.Attempts, WorkerID: j.WorkerID, StartedAt: j.StartedAt,
		FinishedAt: now, FailureKind: job.KindTransient}
	e.how = permitFailed
	if !j.LeaseExpiresAt.After(now) {
		e.cause, e.kind = triage.LeaseExpired, breaker.LeaseExpired
		a.Outcome, a.ErrorType = job.OutcomeLeaseExpired, leaseExpiredErrorType
		a.Message = fmt.Sprintf("lease expired: no heartbeat or result from worker %q", j.WorkerID)
	} else {
		e.cause, e.kind = triage.Timeout, breaker.Timeout
		a.Outcome, a.ErrorType = job.OutcomeTimeout, timeoutErrorType
		a.Message = timeoutMessage(j)
	}
	e.decision = b.triager.Failed(j.Type, triage.Attempt{Number: j.Attempts, MaxAttempts: j.MaxAttempts,
		CreatedAt: j.LifetimeStart(), Cause: e.cause}, now)
	e.params = finishParams(ref, j, e.decision, a, now)
	if e.applied, err = tx.JobFinish(e.params); err != nil {
		return err
	}
	if e.params.State == job.StatePending {
		tx.Publish(readyEvent)
	}
	return nil
}
