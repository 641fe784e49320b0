package worker

import (
	"fmt"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// A handler must not outlive its lease, whether or not the broker can say so: a broker that is
// frozen or cut off sends no Cancel, and the job's next attempt may already run elsewhere. So
// the worker keeps its own deadline for each lease it runs and cancels the handler
// (errLeaseExpired, which is ErrLeaseLost) once that deadline passes without an extension; see
// "Leases, fencing tokens and heartbeats" in docs/protocol.md.
//
// The worker knows only durations, never the broker's clock. The broker counts a lease from
// the moment it granted or extended it, which is before the worker hears of it, so the worker
// counts from a moment it knows is no later than that:
//
//   - an Assignment: when it arrived (late by the one-way latency, which the margin covers);
//   - an extension: when the oldest heartbeat that named the lease and had no answer yet was
//     sent, since the broker extends by the lease duration from when it reads a heartbeat. Should
//     the worker have no such heartbeat on record, the HeartbeatAck's arrival.
//
// From there the lease lasts Welcome.lease_duration less leaseMargin.

// errLeaseExpired is the cause a handler sees when its lease ran out on the worker's own clock.
var errLeaseExpired = fmt.Errorf("%w: no extension from the broker within the lease duration", ErrLeaseLost)

const (
	// minLeaseMargin and maxLeaseMargin bound leaseMargin's tenth of the lease.
	minLeaseMargin = 250 * time.Millisecond
	maxLeaseMargin = 5 * time.Second
)

// leaseMargin is how much sooner than the broker the worker gives a lease up: a tenth of the
// lease, at least minLeaseMargin and at most maxLeaseMargin, to cover the latency between the
// broker granting a lease and the worker hearing of it, the time the broker takes to store an
// extension before it answers, and the drift between the two machines' clock rates. It never
// exceeds half the time a heartbeat has to be answered before the lease would run out
// (lease - heartbeat), so a healthy broker's extension always arrives in time.
func leaseMargin(lease, heartbeat time.Duration) time.Duration {
	m := min(max(lease/10, minLeaseMargin), maxLeaseMargin)
	return max(min(m, (lease-heartbeat)/2), 0)
}

// armLeaseLocked (re)starts t's lease deadline at from plus the session's lease allowance. A
// session whose Welcome gave no lease duration leaves leases to the broker.
func (w *Worker) armLeaseLocked(t *task, s *session, from time.Time) {
	w.stopLeaseLocked(t)
	if s.leaseAllowance <= 0 {
		return
	}
	t.leaseEnd = from.Add(s.leaseAllowance)
	gen := t.leaseGen
	t.leaseTimer = w.clock.AtFunc(t.leaseEnd, func() { w.leaseRanOut(t, gen) })
}

// stopLeaseLocked stops watching t's lease: its handler returned, or the task was given up.
func (w *Worker) stopLeaseLocked(t *task) {
	if t.leaseTimer != nil {
		t.leaseTimer.Stop()
		t.leaseTimer = nil
	}
	t.leaseGen++ // a timer that fires all the same finds itself outdated
}

// leaseRanOut gives up a job whose lease passed its deadline on this worker's clock: its
// handler is cancelled and its outcome will not be reported, as after a Cancel(LEASE_LOST).
func (w *Worker) leaseRanOut(t *task, gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.leaseGen != gen || w.tasks[t.ref] != t || (t.state != stateLeased && t.state != stateRunning) {
		return
	}
	w.log.Warn("worker: lease ran out without an extension from the broker: stopping the job",
		"job_id", t.ref.jobID, "lease_end", t.leaseEnd)
	w.loseLocked(t, errLeaseExpired)
}

// noteHeartbeatLocked records that a heartbeat naming every held lease is being sent at now.
func (w *Worker) noteHeartbeatLocked(now time.Time) {
	for _, t := range w.tasks {
		if t.heartbeatAt.IsZero() {
			t.heartbeatAt = now
		}
	}
}

// forgetHeartbeatsLocked drops the record of heartbeats sent on an earlier stream: they will
// never be answered.
func (w *Worker) forgetHeartbeatsLocked() {
	for _, t := range w.tasks {
		t.heartbeatAt = time.Time{}
	}
}

// onExtendedLocked moves the deadline of every lease a HeartbeatAck lists as extended.
func (w *Worker) onExtendedLocked(s *session, extended []*jobwirev1.LeaseRef) {
	now := w.clock.Now()
	for _, l := range extended {
		t := w.tasks[refOf(l.GetJobId(), l.GetLeaseToken())]
		if t == nil {
			continue
		}
		from := now
		if !t.heartbeatAt.IsZero() && t.heartbeatAt.Before(now) {
			from = t.heartbeatAt
		}
		t.heartbeatAt = time.Time{}
		if t.state == stateLeased || t.state == stateRunning {
			w.armLeaseLocked(t, s, from)
		}
	}
}
