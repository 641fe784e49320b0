package broker

import (
	"fmt"
	"sync"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// What a job gives back: the result its success returns and the progress its running attempt
// reports. A result rides the success's own write (store.JobFinishParams.Result), so it costs
// no statement of its own; progress is coalesced (progressQueue), so a worker reporting often
// costs one write per commit, not one per report.

const (
	// DefaultMaxResultBytes is the largest result stored unless configured otherwise.
	DefaultMaxResultBytes = 1 << 20
	// MaxMaxResultBytes bounds the setting: a result travels in one worker message.
	MaxMaxResultBytes = 16 << 20
	// ResultTooLarge is the error type of an attempt whose result was too large to store.
	ResultTooLarge = "ResultTooLarge"
	// AssignmentTooLarge is the error type of a job whose assignment was larger than a
	// worker reads in one message (Session.Undeliverable).
	AssignmentTooLarge = "AssignmentTooLarge"
)

// Undeliverable fails the attempt of an assignment its transport could not send: encoded, it
// is size bytes, more than the limit a worker reads in one message. Any worker would refuse it
// alike, and a retry would send the same payload and parents' results, so the failure is
// FATAL: the job goes to the dead-letter queue with its size in the error. Sent anyway, it
// would end the worker's stream, its lease would expire, and the next worker would get the
// same message, with no attempt ever counted. The worker is not told: it never saw the lease.
func (s *Session) Undeliverable(ref job.LeaseRef, size, limit int) {
	s.finish(ref, &job.Failure{Kind: job.KindFatal, ErrorType: AssignmentTooLarge,
		Message: fmt.Sprintf("the job's assignment is %d bytes encoded (its payload, metadata and parents' results); "+
			"a worker reads at most %d in one message", size, limit)}, nil, true)
}

// maxResultBytes is the largest result this broker stores.
func (b *Broker) maxResultBytes() int {
	if b.cfg.MaxResultBytes == 0 {
		return DefaultMaxResultBytes
	}
	return b.cfg.MaxResultBytes
}

// checkResult turns a success whose result is too large into the FATAL failure the protocol
// promises (a retry would return the same result): the job goes DEAD with the size in its
// error, rather than losing the result silently or storing what the producer was not promised.
func (b *Broker) checkResult(failure *job.Failure, result []byte) (*job.Failure, []byte) {
	if failure != nil {
		return failure, nil
	}
	if max := b.maxResultBytes(); len(result) > max {
		return &job.Failure{Kind: job.KindFatal, ErrorType: ResultTooLarge,
			Message: fmt.Sprintf("the result is %d bytes; this broker stores at most %d (max_result_bytes)", len(result), max)}, nil
	}
	return nil, result
}

// progressQueue holds the progress reports not yet handed to the writer, the newest per
// lease. One progressOp at a time is queued for the writer; reports that come before it is
// applied join it, replacing older ones of the same lease, so a burst of reports is one write.
type progressQueue struct {
	mu      sync.Mutex
	pending map[job.LeaseRef]progressReport
	queued  bool // a progressOp waits for the writer and will take pending
}

// progressReport is one report and the session to refuse it to if its lease is stale.
type progressReport struct {
	s *Session
	p store.JobProgressParams
}

// Progress stores how far a running job got (p.Attempt is set here). A report breaking its
// rules (job.CheckProgress) is refused with the reason, and the job goes on; a stale lease is
// refused at once; anything else is stored with the reports written next. Nothing is answered on
// success: progress is advisory, and the next report replaces it.
func (s *Session) Progress(ref job.LeaseRef, p job.Progress) {
	b := s.b
	if err := job.CheckProgress(p.Fraction, p.HasFraction, p.Message); err != nil {
		s.refuse(ref, AboutProgress, RefusedInvalid, err.Error())
		return
	}
	b.mu.Lock()
	l := s.currentLocked(ref)
	if l == nil || l.finishing() {
		b.mu.Unlock()
		s.refuse(ref, AboutProgress, RefusedStale, staleLease)
		return
	}
	p.Attempt = l.job.AttemptBase + l.attempt
	l.progressed = true // its write may land: the result's no longer knows the row
	b.mu.Unlock()
	p.UpdatedAt = b.now()
	q := &b.writing.progress
	q.mu.Lock()
	if q.pending == nil {
		q.pending = make(map[job.LeaseRef]progressReport)
	}
	q.pending[ref] = progressReport{s: s, p: store.JobProgressParams{Ref: ref, Progress: p}}
	submit := !q.queued
	q.queued = true
	q.mu.Unlock()
	if submit {
		b.submit(&progressOp{b: b})
	}
}

// progressOp writes the reports pending when the writer takes it, in one transaction.
type progressOp struct {
	b       *Broker
	reports []progressReport // taken from the queue on first use, kept for a retried batch
	taken   bool
	applied []bool
}

// take moves the pending reports into the op, once.
func (o *progressOp) take() {
	if o.taken {
		return
	}
	q := &o.b.writing.progress
	q.mu.Lock()
	for _, r := range q.pending {
		o.reports = append(o.reports, r)
	}
	clear(q.pending)
	q.queued = false
	q.mu.Unlock()
	o.taken = true
}

func (o *progressOp) Name() string { return "progress" }

func (o *progressOp) WritesJobs() []int64 {
	o.take()
	ids := make([]int64, len(o.reports))
	for i, r := range o.reports {
		ids[i] = r.p.Ref.JobID
	}
	return ids
}

func (o *progressOp) Apply(tx store.Tx) error {
	o.take()
	ps := make([]*store.JobProgressParams, len(o.reports))
	for i := range o.reports {
		ps[i] = &o.reports[i].p
	}
	var err error
	o.applied, err = tx.JobProgressMany(ps)
	for i, ok := range o.applied {
		if ok {
			o.b.publishChanged(tx, ps[i].Ref.JobID)
		}
	}
	return err
}

// Done refuses the reports of stale leases and tells watchers of the others. A failed write
// is only logged: the worker's next report replaces what it would have stored.
func (o *progressOp) Done(err error) {
	o.take() // a batch that failed before applying it
	if err != nil {
		o.b.log.Debug("could not store progress", "reports", len(o.reports), "err", err)
		return
	}
	changed := make([]int64, 0, len(o.reports))
	for i, r := range o.reports {
		if i < len(o.applied) && o.applied[i] {
			changed = append(changed, r.p.Ref.JobID)
			continue
		}
		r.s.refuse(r.p.Ref, AboutProgress, RefusedStale, staleLease)
	}
	o.b.jobsChanged(changeRunning, changed...) // progress is stored on running jobs only
}
