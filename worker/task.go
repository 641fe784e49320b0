package worker

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// leaseRef names one lease: every message about a job carries both parts.
type leaseRef struct {
	jobID int64
	token string
}

func refOf(jobID int64, token string) leaseRef { return leaseRef{jobID: jobID, token: token} }

func (r leaseRef) proto() *jobwirev1.LeaseRef {
	return &jobwirev1.LeaseRef{JobId: r.jobID, LeaseToken: r.token}
}

// taskState is where a held lease is on this side of the stream.
type taskState int

const (
	// stateLeased: assigned, waiting for a handler slot; user code has not started.
	stateLeased taskState = iota + 1
	// stateRunning: Started was sent (or is queued) and user code runs.
	stateRunning
	// stateDone: user code returned; the result waits for the broker's acknowledgement.
	stateDone
	// stateReleasing: the job is being handed back without having started.
	stateReleasing
)

// task is one held lease. Its fields are guarded by Worker.mu. A task leaves Worker.tasks when the
// broker no longer counts it against this worker; a handler whose task left is abandoned and its
// result dropped.
type task struct {
	ref    leaseRef
	job    Job
	ctx    context.Context
	cancel context.CancelCauseFunc

	state         taskState
	startedSent   bool
	result        *jobwirev1.Result
	releaseReason string
	// refusals counts UNAVAILABLE refusals in a row, for the re-send backoff.
	refusals int

	// The lease as this worker counts it (lease.go): leaseTimer gives the job up at leaseEnd
	// unless an extension moves it first; leaseGen tells a stopped timer's late call from the
	// current one. heartbeatAt is when the oldest heartbeat that named the lease on this stream
	// and has no answer yet was sent.
	leaseEnd    time.Time
	leaseTimer  clock.Timer
	leaseGen    int
	heartbeatAt time.Time
}

// startTaskLocked takes on an assignment and starts its goroutine.
func (w *Worker) startTaskLocked(s *session, a *jobwirev1.Assignment, h HandlerFunc) {
	pj := a.GetJob()
	t := &task{
		ref: refOf(pj.GetId(), a.GetLeaseToken()),
		job: Job{
			ID:             pj.GetId(),
			Type:           pj.GetType(),
			Queue:          pj.GetQueue(),
			Payload:        pj.GetPayload(),
			Priority:       int(pj.GetPriority()),
			Attempt:        int(a.GetAttempt()),
			MaxAttempts:    int(pj.GetMaxAttempts()),
			IdempotencyKey: pj.GetIdempotencyKey(),
			LeaseToken:     a.GetLeaseToken(),
			Metadata:       pj.GetMetadata(),
		},
		state: stateLeased,
	}
	if pj.GetCreatedAt() != nil {
		t.job.CreatedAt = pj.GetCreatedAt().AsTime()
	}
	if d := a.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		t.job.AttemptTimeout = d.AsDuration()
	} else if d := pj.GetAttemptTimeout(); d != nil && d.AsDuration() > 0 {
		t.job.AttemptTimeout = d.AsDuration()
	}
	t.job.ParentResults = parentResults(a)
	t.job.out = &outcome{clk: w.clock, send: func(p *jobwirev1.Progress) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sendProgressLocked(t, p)
	}}
	t.ctx, t.cancel = context.WithCancelCause(w.handlerBase)
	w.tasks[t.ref] = t
	w.armLeaseLocked(t, s, w.clock.Now())
	w.active++
	go w.runTask(t, h)
}

// runTask waits for a handler slot, announces Started, runs the handler and reports its result.
func (w *Worker) runTask(t *task, h HandlerFunc) {
	defer func() {
		t.cancel(context.Canceled)
		w.mu.Lock()
		w.active--
		w.checkLocked()
		w.mu.Unlock()
	}()

	if !w.acquireSlot(t) {
		w.mu.Lock()
		if w.tasks[t.ref] == t {
			w.releaseLocked(t, releaseReason(context.Cause(t.ctx)))
		}
		w.mu.Unlock()
		return
	}
	defer func() { <-w.slots }()

	w.mu.Lock()
	if w.tasks[t.ref] != t {
		w.mu.Unlock()
		return
	}
	if t.ctx.Err() != nil {
		w.releaseLocked(t, releaseReason(context.Cause(t.ctx)))
		w.mu.Unlock()
		return
	}
	t.state = stateRunning
	s := w.readySessionLocked()
	written := make(chan struct{})
	if s != nil {
		w.putStartedLocked(s, t, written)
	}
	w.mu.Unlock()
	// The attempt counts from Started, so user code waits until it is on the wire. Without a
	// stream it runs anyway: the next stream replays Started before anything else about it.
	if s != nil {
		select {
		case <-written:
		case <-s.done:
		}
	}

	ctx, span := w.startProcess(t.ctx, &t.job)
	err, cause := w.call(ctx, t, h)
	returned := t.job.out.end() // the last progress goes before the result
	result := resultFor(t.ref, err, cause, w.sentinels)
	if s := result.GetSuccess(); s != nil {
		s.Result = returned
	}
	endProcess(span, result)

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tasks[t.ref] != t {
		return // cancelled or lost: the broker has recorded the outcome already
	}
	// The result is sent whatever becomes of the lease now; the broker refuses it if stale.
	w.stopLeaseLocked(t)
	t.state = stateDone
	t.result = result
	if s := w.readySessionLocked(); s != nil {
		s.put(outMsg{req: &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: t.result}}})
	}
}

// acquireSlot takes a handler slot, or gives up when the task's context ends first.
func (w *Worker) acquireSlot(t *task) bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
	}
	if w.hooks.slotWait != nil {
		w.hooks.slotWait(t.ref.jobID)
	}
	select {
	case w.slots <- struct{}{}:
		return true
	case <-t.ctx.Done():
		return false
	}
}

// call runs the handler, turning a panic into a *PanicError. cause is why the handler's
// context ended, if it did by the time the handler returned: ErrAttemptTimeout when the
// attempt timeout cut it off.
func (w *Worker) call(ctx context.Context, t *task, h HandlerFunc) (err, cause error) {
	if t.job.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t.job.AttemptTimeout, ErrAttemptTimeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		cause = context.Cause(ctx)
	}()
	j := t.job
	return h(ctx, &j), nil
}

// releaseLocked hands a never-started job back to the broker.
func (w *Worker) releaseLocked(t *task, reason string) {
	w.stopLeaseLocked(t)
	t.state = stateReleasing
	t.releaseReason = reason
	if s := w.readySessionLocked(); s != nil {
		w.putReleaseLocked(s, t)
	}
}

func releaseReason(cause error) string {
	switch {
	case errors.Is(cause, ErrShutdown):
		return "worker shutting down"
	case errors.Is(cause, errBrokerDraining):
		return "broker draining"
	}
	return "released"
}

// putStartedLocked queues Started; written, if not nil, is closed once it is on the wire.
func (w *Worker) putStartedLocked(s *session, t *task, written chan struct{}) {
	s.put(outMsg{
		req: &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Started{
			Started: &jobwirev1.Started{JobId: t.ref.jobID, LeaseToken: t.ref.token},
		}},
		sent: func() {
			w.mu.Lock()
			t.startedSent = true
			w.mu.Unlock()
			if written != nil {
				close(written)
			}
		},
	})
}

// putReleaseLocked queues Release. Release has no acknowledgement, so the lease is dropped once the
// message is on the wire; a Refused UNAVAILABLE for it is answered from the Refused message alone.
func (w *Worker) putReleaseLocked(s *session, t *task) {
	s.put(outMsg{
		req: releaseMsg(t.ref, t.releaseReason),
		sent: func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.tasks[t.ref] == t {
				delete(w.tasks, t.ref)
				w.checkLocked()
			}
		},
	})
}

// loseLocked gives a task up: the broker no longer counts it against this worker, so its handler is
// cancelled with cause and its result will not be sent.
func (w *Worker) loseLocked(t *task, cause error) {
	if w.tasks[t.ref] == t {
		delete(w.tasks, t.ref)
	}
	w.stopLeaseLocked(t)
	t.cancel(cause)
	w.checkLocked()
}

func releaseMsg(ref leaseRef, reason string) *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Release{
		Release: &jobwirev1.Release{JobId: ref.jobID, LeaseToken: ref.token, Reason: reason},
	}}
}

func drainMsg() *jobwirev1.ConnectRequest {
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Drain{Drain: &jobwirev1.Drain{}}}
}

// shutdownErrorType is the error type every worker library reports for a handler that the
// shutdown grace period cut off (see docs/protocol.md), so the DLQ groups them together.
const shutdownErrorType = "WorkerShutdown"

// resultFor builds the Result message for a handler's return value; cause is why the
// handler's context ended, if it did, and sentinels the errors the worker registered.
func resultFor(ref leaseRef, err, cause error, sentinels map[error]string) *jobwirev1.Result {
	r := &jobwirev1.Result{JobId: ref.jobID, LeaseToken: ref.token}
	if err == nil {
		r.Outcome = &jobwirev1.Result_Success{Success: &jobwirev1.Success{}}
		return r
	}
	f := classify(err, sentinels)
	if errors.Is(cause, ErrShutdown) && !f.Fatal {
		// The job did not fail: the worker stopped under it. Always transient.
		f.ErrorType, f.Message, f.RetryAfter = shutdownErrorType, "the worker shut down before the job finished: "+f.Message, 0
	}
	timedOut := errors.Is(cause, ErrAttemptTimeout)
	if timedOut {
		// The attempt timeout stopped it: a timeout, whatever error the handler made of that.
		f.Fatal, f.RetryAfter = false, 0
	}
	pf := &jobwirev1.Failure{
		TimedOut:  timedOut,
		Kind:      jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT,
		ErrorType: f.ErrorType,
		Message:   f.Message,
		Details:   f.Details,
	}
	if f.Fatal {
		pf.Kind = jobwirev1.FailureKind_FAILURE_KIND_FATAL
	}
	if f.RetryAfter > 0 {
		pf.RetryAfter = durationpb.New(f.RetryAfter)
	}
	r.Outcome = &jobwirev1.Result_Failure{Failure: pf}
	return r
}
