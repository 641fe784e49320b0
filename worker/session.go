package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

var (
	// errBrokerDraining is the cause given to jobs handed back because the broker asked this
	// worker to drain.
	errBrokerDraining = errors.New("worker: broker asked to drain")
	errSessionEnded   = errors.New("worker: session ended")
	errCloseTimeout   = errors.New("worker: broker did not end the stream after it was half-closed")
)

type stream = grpc.BidiStreamingClient[jobwirev1.ConnectRequest, jobwirev1.ConnectResponse]

// session is one Connect stream. Exactly one goroutine sends on it (sendLoop, or runSession
// itself before Welcome) and one receives (runSession), as gRPC requires; everyone else queues
// messages with put, which never blocks, so it is safe under Worker.mu.
type session struct {
	cancel context.CancelCauseFunc
	// done is closed when the session is over; queued messages are then dropped and replayed
	// by the next session as needed.
	done chan struct{}

	box outbox

	// Guarded by Worker.mu.
	ready       bool // Welcome received: messages may be queued
	draining    bool // the broker sent DrainRequest
	hbInterval  time.Duration
	hbTimer     clock.Timer
	finishTimer clock.Timer
	// finishing: nothing is left to do on this stream; it is half-closed once Welcome has
	// arrived and whatever is queued is written.
	finishing bool
	// leaseAllowance is how long a lease lasts on this worker's clock: Welcome.lease_duration
	// less leaseMargin. Zero (no lease duration announced) leaves leases to the broker.
	leaseAllowance time.Duration
}

// outMsg is one queued message. sent, if set, runs after the message was written to the stream.
type outMsg struct {
	req  *jobwirev1.ConnectRequest
	sent func()
}

// outbox is an unbounded FIFO. It never blocks its writers: the worker queues at most a few
// messages per held job plus one heartbeat per interval, and a blocking queue would let a slow
// stream stall the receive loop while it holds the worker's lock.
type outbox struct {
	mu      sync.Mutex
	queue   []outMsg
	closing bool
	signal  chan struct{}
}

func (b *outbox) put(m outMsg) {
	b.mu.Lock()
	if !b.closing {
		b.queue = append(b.queue, m)
	}
	b.mu.Unlock()
	b.notify()
}

// close asks the send loop to half-close the stream once the queue is empty.
func (b *outbox) close() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.notify()
}

func (b *outbox) notify() {
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

func (b *outbox) take() ([]outMsg, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q, b.closing
}

func (s *session) put(m outMsg) { s.box.put(m) }

// runSession runs one stream from Hello to its end. welcomed reports whether the broker accepted
// the session, which decides whether an error is worth reconnecting for.
func (w *Worker) runSession(ctx context.Context) (welcomed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errSessionEnded)
	s := &session{
		cancel: cancel,
		done:   make(chan struct{}),
		box:    outbox{signal: make(chan struct{}, 1)},
	}

	w.mu.Lock()
	w.sess = s
	hello := &jobwirev1.Hello{
		WorkerId: w.opts.ID,
		JobTypes: w.jobTypes,
		Queues:   w.opts.Queues,
		Capacity: int32(w.opts.Concurrency),
		Held:     w.heldLocked(),
		Movable:  w.movable,
		// The broker then sends what is ready at once as one frame (ConnectResponse.batch).
		AcceptsBatches: true,
	}
	w.mu.Unlock()

	sendDone := make(chan struct{})
	sendStarted := false
	defer func() {
		w.mu.Lock()
		if w.sess == s {
			w.sess = nil
		}
		s.ready = false
		if s.hbTimer != nil {
			s.hbTimer.Stop()
		}
		if s.finishTimer != nil {
			s.finishTimer.Stop()
		}
		close(s.done)
		w.mu.Unlock()
		cancel(errSessionEnded)
		if sendStarted {
			<-sendDone
		}
	}()

	// Assignments as large as the broker takes: the connection may be the caller's own, with
	// gRPC's default of 4 MiB (client.MaxReceiveBytes).
	st, err := w.client.Connect(ctx, grpc.MaxCallRecvMsgSize(client.MaxReceiveBytes))
	if err != nil {
		return false, err
	}
	if err := st.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		// Send reports only that the stream is gone; Recv has the broker's status.
		if _, rerr := st.Recv(); rerr != nil {
			return false, rerr
		}
		return false, err
	}
	first, err := st.Recv()
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("worker: broker answered Hello with %T, want Welcome", first.GetMessage())
	}

	sendStarted = true
	go func() {
		defer close(sendDone)
		w.sendLoop(s, st)
	}()
	w.onWelcome(s, welcome)

	for {
		msg, err := st.Recv()
		if err != nil {
			if c := context.Cause(ctx); c != nil && !errors.Is(c, errSessionEnded) {
				err = fmt.Errorf("%w (%w)", err, c)
			}
			return true, err
		}
		w.dispatch(s, msg)
	}
}

// A batch frame carries at most maxBatch messages, and gathers at most maxBatchBytes of them
// encoded: a message that would take it past that starts the next frame, and one larger goes
// alone (docs/protocol.md, batch frames). The broker reads 4 MiB a message by default, so
// results ready together, each within the result limit, never add up to a frame it refuses.
const (
	maxBatch      = 1024
	maxBatchBytes = 1 << 20
)

// batchable reports whether m may travel in a batch frame: Hello, Drain and batches never do.
func batchable(m *jobwirev1.ConnectRequest) bool {
	switch m.GetMessage().(type) {
	case *jobwirev1.ConnectRequest_Started, *jobwirev1.ConnectRequest_Heartbeat, *jobwirev1.ConnectRequest_Result,
		*jobwirev1.ConnectRequest_Release, *jobwirev1.ConnectRequest_Progress:
		return true
	}
	return false
}

// frames packs the messages queued at once into what goes on the wire, in order: each run of
// messages that may travel together becomes one batch frame of up to maxBatch messages and
// maxBatchBytes, and a run of one, or a message that may not be batched, goes alone. Every
// gRPC message costs both ends a stream operation, so a frame of n saves each n-1 of them;
// nothing is held back to wait for company, since only what is already queued is packed.
func frames(msgs []outMsg) [][]outMsg {
	var out [][]outMsg
	for i := 0; i < len(msgs); {
		j := i + 1
		if batchable(msgs[i].req) {
			size := msgs[i].req.SizeVT()
			for j < len(msgs) && j-i < maxBatch && batchable(msgs[j].req) {
				if size += msgs[j].req.SizeVT(); size > maxBatchBytes {
					break
				}
				j++
			}
		}
		out = append(out, msgs[i:j])
		i = j
	}
	return out
}

// frameOf is the one message that carries msgs: the message itself when it is alone.
func frameOf(msgs []outMsg) *jobwirev1.ConnectRequest {
	if len(msgs) == 1 {
		return msgs[0].req
	}
	inner := make([]*jobwirev1.ConnectRequest, len(msgs))
	for i, m := range msgs {
		inner[i] = m.req
	}
	return &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Batch{
		Batch: &jobwirev1.ConnectRequestBatch{Messages: inner}}}
}

// sendLoop is the only goroutine that writes to the stream once Welcome arrived.
func (w *Worker) sendLoop(s *session, st stream) {
	for {
		msgs, closing := s.box.take()
		for _, frame := range frames(msgs) {
			if err := st.Send(frameOf(frame)); err != nil {
				s.cancel(fmt.Errorf("worker: send: %w", err))
				return
			}
			for _, m := range frame {
				if m.sent != nil {
					m.sent()
				}
			}
		}
		if closing && len(msgs) == 0 {
			if err := st.CloseSend(); err != nil {
				s.cancel(fmt.Errorf("worker: close send: %w", err))
			}
			return
		}
		if len(msgs) > 0 {
			continue
		}
		select {
		case <-s.box.signal:
		case <-s.done:
			return
		}
	}
}

// onWelcome drops the leases the broker says are lost, replays what the broker must still hear
// about the others, and starts heartbeats.
func (w *Worker) onWelcome(s *session, wel *jobwirev1.Welcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.ready = true
	// Heartbeats of the old stream are never answered; adopted leases keep their deadlines.
	w.forgetHeartbeatsLocked()
	w.log.Info("worker: connected", "session_id", wel.GetSessionId(), "held", len(w.tasks), "lost", len(wel.GetLost()))
	if w.stopping {
		s.put(outMsg{req: drainMsg()})
	}
	for _, l := range wel.GetLost() {
		if t := w.tasks[refOf(l.GetJobId(), l.GetLeaseToken())]; t != nil {
			w.loseLocked(t, ErrLeaseLost)
		}
	}
	for _, ref := range w.sortedRefsLocked() {
		t := w.tasks[ref]
		switch t.state {
		case stateRunning:
			// Again even if it was written: the old stream may have ended before the broker
			// read it, and then the adopted lease is not started there (the attempt would not
			// count, nor its timeout run). A broker that has it already ignores it.
			w.putStartedLocked(s, t, nil)
		case stateDone:
			if !t.startedSent {
				w.putStartedLocked(s, t, nil)
			}
			s.put(resultMsg(t.result))
		case stateReleasing:
			w.putReleaseLocked(s, t)
		}
	}

	s.hbInterval = wel.GetHeartbeatInterval().AsDuration()
	if s.hbInterval <= 0 {
		s.hbInterval = wel.GetLeaseDuration().AsDuration() / 3
	}
	if s.hbInterval <= 0 {
		s.hbInterval = defaultHeartbeat
	}
	if lease := wel.GetLeaseDuration().AsDuration(); lease > 0 {
		s.leaseAllowance = lease - leaseMargin(lease, s.hbInterval)
	}
	s.hbTimer = w.clock.AfterFunc(s.hbInterval, func() { w.heartbeat(s) })
	if s.finishing {
		s.box.close()
	}
	w.checkLocked()
}

// heartbeat extends every held lease, then schedules the next heartbeat.
func (w *Worker) heartbeat(s *session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sess != s || !s.ready {
		return
	}
	if held := w.heldLocked(); len(held) > 0 {
		w.noteHeartbeatLocked(w.clock.Now())
		s.put(outMsg{req: &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{
			Heartbeat: &jobwirev1.Heartbeat{Leases: held},
		}}})
	}
	s.hbTimer = w.clock.AfterFunc(s.hbInterval, func() { w.heartbeat(s) })
}

func resultMsg(r *jobwirev1.Result) outMsg {
	return outMsg{req: &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Result{Result: r}}}
}

// dispatch handles one frame from the broker, a message or a batch of them in order. It runs
// on the receiving goroutine.
func (w *Worker) dispatch(s *session, msg *jobwirev1.ConnectResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b, ok := msg.GetMessage().(*jobwirev1.ConnectResponse_Batch); ok {
		for _, m := range b.Batch.GetMessages() {
			w.dispatchLocked(s, m)
		}
		return
	}
	w.dispatchLocked(s, msg)
}

// dispatchLocked handles one broker message (never a batch: dispatch unpacks those).
func (w *Worker) dispatchLocked(s *session, msg *jobwirev1.ConnectResponse) {
	switch m := msg.GetMessage().(type) {
	case *jobwirev1.ConnectResponse_Assignment:
		w.onAssignmentLocked(s, m.Assignment)
	case *jobwirev1.ConnectResponse_ResultAck:
		ref := refOf(m.ResultAck.GetJobId(), m.ResultAck.GetLeaseToken())
		if t := w.tasks[ref]; t != nil && t.state == stateDone {
			delete(w.tasks, ref)
			w.checkLocked()
		}
	case *jobwirev1.ConnectResponse_HeartbeatAck:
		// Leases not listed as extended are answered by a Refused each.
		w.onExtendedLocked(s, m.HeartbeatAck.GetExtended())
	case *jobwirev1.ConnectResponse_Refused:
		w.onRefusedLocked(s, m.Refused)
	case *jobwirev1.ConnectResponse_Cancel:
		c := m.Cancel
		if t := w.tasks[refOf(c.GetJobId(), c.GetLeaseToken())]; t != nil {
			w.loseLocked(t, cancelCause(c.GetReason()))
		}
	case *jobwirev1.ConnectResponse_Drain:
		w.log.Info("worker: broker asked to drain", "reason", m.Drain.GetReason())
		s.draining = true
		for _, t := range w.tasks {
			if t.state == stateLeased {
				t.cancel(errBrokerDraining)
			}
		}
		w.checkLocked()
	default:
		w.log.Warn("worker: unexpected message from broker", "type", fmt.Sprintf("%T", m))
	}
}

func cancelCause(r jobwirev1.CancelReason) error {
	switch r {
	case jobwirev1.CancelReason_CANCEL_REASON_TIMEOUT:
		return ErrAttemptTimeout
	case jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST:
		return ErrLeaseLost
	}
	return ErrJobCancelled
}

// onAssignmentLocked takes on a job, or hands it straight back if this worker cannot run it now.
func (w *Worker) onAssignmentLocked(s *session, a *jobwirev1.Assignment) {
	ref := refOf(a.GetJob().GetId(), a.GetLeaseToken())
	if _, dup := w.tasks[ref]; dup {
		return
	}
	h := w.handlers[a.GetJob().GetType()]
	var reason string
	switch {
	case h == nil:
		reason = "no handler for job type " + a.GetJob().GetType()
	case w.stopping:
		reason = "worker shutting down"
	case s.draining:
		reason = "broker draining"
	case len(w.tasks) >= w.opts.Concurrency:
		reason = "worker at capacity"
	}
	if reason == "" {
		w.startTaskLocked(s, a, h)
		return
	}
	w.log.Warn("worker: releasing assignment", "job_id", ref.jobID, "reason", reason)
	// Held until the Release is on the wire, so a reconnect in between still reports the
	// lease in Hello and releases it then.
	t := &task{ref: ref, state: stateReleasing, releaseReason: reason, cancel: func(error) {}}
	w.tasks[ref] = t
	w.putReleaseLocked(s, t)
}

// onRefusedLocked handles a worker message the broker did not apply. UNAVAILABLE means the
// broker's storage was busy: the message is sent again after a backoff. Any other code means the
// lease is stale or the job finished, and nothing about it will be accepted any more.
func (w *Worker) onRefusedLocked(s *session, r *jobwirev1.Refused) {
	ref := refOf(r.GetJobId(), r.GetLeaseToken())
	retry := codes.Code(r.GetCode()) == codes.Unavailable
	t := w.tasks[ref]
	w.log.Debug("worker: message refused", "job_id", ref.jobID, "message", r.GetRefusedMessage(),
		"code", codes.Code(r.GetCode()), "reason", r.GetMessage())
	switch r.GetRefusedMessage() {
	case jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT:
		if t == nil || t.state != stateDone {
			return
		}
		if !retry {
			delete(w.tasks, ref)
			w.checkLocked()
			return
		}
		w.resendLocked(s, t, func() {
			if t.state == stateDone {
				s.put(resultMsg(t.result))
			}
		})
	case jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED:
		if t == nil {
			return
		}
		if !retry {
			w.loseLocked(t, ErrLeaseLost)
			return
		}
		w.resendLocked(s, t, func() {
			if t.state == stateRunning || t.state == stateDone {
				w.putStartedLocked(s, t, nil)
			}
		})
	case jobwirev1.RefusedMessage_REFUSED_MESSAGE_HEARTBEAT:
		if t != nil && !retry {
			w.loseLocked(t, ErrLeaseLost)
		}
	case jobwirev1.RefusedMessage_REFUSED_MESSAGE_PROGRESS:
		// Progress is advisory: a busy broker's refusal is not worth a re-send (the next
		// report replaces it), and one breaking a rule is only logged. A stale lease is lost.
		if codes.Code(r.GetCode()) == codes.InvalidArgument {
			w.log.Warn("worker: progress refused", "job_id", ref.jobID, "reason", r.GetMessage())
		} else if t != nil && !retry && t.state == stateRunning {
			w.loseLocked(t, ErrLeaseLost)
		}
	case jobwirev1.RefusedMessage_REFUSED_MESSAGE_RELEASE:
		if !retry {
			return
		}
		// The lease was dropped when the Release was written; answer from the Refused itself.
		reason := "released"
		if t != nil {
			reason = t.releaseReason
		}
		w.clock.AfterFunc(w.opts.ReconnectBackoff.Delay(0), func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.readySessionLocked() == s {
				s.put(outMsg{req: releaseMsg(ref, reason)})
			}
		})
	}
}

// resendLocked runs send after a backoff if t is still held and s is still the live session (a
// new session replays everything unacknowledged by itself).
func (w *Worker) resendLocked(s *session, t *task, send func()) {
	delay := w.opts.ReconnectBackoff.Delay(t.refusals)
	t.refusals++
	w.clock.AfterFunc(delay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.readySessionLocked() != s || w.tasks[t.ref] != t {
			return
		}
		send()
	})
}
