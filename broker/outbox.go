package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jobwire/jobwire/job"
)

// errSessionClosed ends a session's send loop.
var errSessionClosed = errors.New("session closed")

// ErrOutboxFull ends the stream of a worker that does not read what the broker sends it.
var ErrOutboxFull = errors.New("the worker is not reading its stream")

// What a worker stream may have waiting to be sent (docs/security.md, "Limits"). Sizes are
// estimates of the encoded messages: payloads and texts, plus a fixed amount per message.
const (
	// OutboxGrantBytes: a session with this much waiting gets no new jobs, and one round hands
	// it at most this much (the store stops leasing once the payloads reach it), so a worker's
	// assignments wait in memory only up to about this much, whatever its capacity.
	OutboxGrantBytes = 4 << 20
	// MaxOutboxBytes: past this much waiting (answers pile up too if the worker sends but does
	// not read), the worker is disconnected. The largest message waiting is not counted: a
	// job's payload may be set larger than this (max_payload_bytes), and such a job, handed
	// out alone, must not end the stream of every worker it is offered to.
	MaxOutboxBytes = 16 << 20
	// maxOutboxMessages caps the messages waiting whatever their size.
	maxOutboxMessages = 4 * maxCapacityHint
	// maxCapacityHint is the largest capacity a worker may declare (server/validate.go).
	maxCapacityHint = 10000
)

// outbox queues messages for one worker stream. It never blocks the broker. It overflows past
// MaxOutboxBytes or maxOutboxMessages, or when messages have waited longer than the broker's
// lease duration (checked by the sweep): it then drops what it holds, closes overflow and its
// send loop ends with ErrOutboxFull. The session is then closed as on any disconnect.
type outbox struct {
	mu         sync.Mutex
	msgs       []Message
	bytes      int
	largest    int       // the size of the largest waiting message, which the limit leaves out
	since      time.Time // when the oldest waiting message was queued
	now        func() time.Time
	notify     chan struct{}
	closed     bool
	overflowed error
	overflow   chan struct{} // closed on overflow
	ended      error         // why the broker closed it (closeWith); nil: errSessionClosed
	// dropped are the leases of the assignments an overflow dropped: they never left.
	dropped []job.LeaseRef
}

func newOutbox(now func() time.Time) *outbox {
	return &outbox{notify: make(chan struct{}, 1), overflow: make(chan struct{}), now: now}
}

// messageSize estimates a message's encoded size.
func messageSize(m Message) int {
	const fixed = 128
	switch m := m.(type) {
	case Assignment:
		return fixed + len(m.Job.Payload) + len(m.Job.Type) + len(m.Job.Queue) + len(m.Job.IdempotencyKey)
	case Refused:
		return fixed + len(m.Message)
	case HeartbeatAck:
		return fixed + 64*len(m.Extended)
	case Welcome:
		return fixed + 64*len(m.Lost)
	}
	return fixed
}

func (o *outbox) push(m Message) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	if len(o.msgs) == 0 {
		o.since = o.now()
	}
	o.msgs = append(o.msgs, m)
	n := messageSize(m)
	o.bytes += n
	o.largest = max(o.largest, n)
	if o.bytes-o.largest > MaxOutboxBytes || len(o.msgs) > maxOutboxMessages {
		o.failLocked(fmt.Errorf("%w: %d messages (about %d bytes) were waiting, more than the limit of %d messages or %d bytes",
			ErrOutboxFull, len(o.msgs), o.bytes, maxOutboxMessages, MaxOutboxBytes))
	}
	o.mu.Unlock()
	o.wake()
}

func (o *outbox) wake() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// failLocked gives up on the stream: what waits is dropped (its memory freed at once) and the
// send loop ends with err.
func (o *outbox) failLocked(err error) {
	if o.overflowed != nil {
		return
	}
	o.overflowed = err
	o.dropped = append(o.dropped, assignedIn(o.msgs)...)
	o.msgs, o.bytes, o.largest, o.closed = nil, 0, 0, true
	close(o.overflow)
}

// checkStalled fails the outbox if its oldest message has waited longer than limit: the
// worker has stopped reading (its send is stuck), though not enough piled up to overflow.
func (o *outbox) checkStalled(now time.Time, limit time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.msgs) > 0 && now.Sub(o.since) > limit {
		o.failLocked(fmt.Errorf("%w: messages have waited %s, longer than the limit of %s", ErrOutboxFull, now.Sub(o.since), limit))
	}
	if o.overflowed != nil {
		o.wake()
	}
}

func (o *outbox) close() { o.closeWith(nil) }

// closeWith closes the outbox for err: what waits is still sent, then the send loop ends with
// err (errSessionClosed when nil), and what is pushed from now on is dropped, as after the
// stream ends.
func (o *outbox) closeWith(err error) {
	o.mu.Lock()
	if !o.closed {
		o.closed, o.ended = true, err
	}
	o.mu.Unlock()
	o.wake()
}

// closeUnsent closes the outbox for good and drops what still waits: the stream has ended, so
// it is never sent. It returns the leases of the assignments that never left, waiting or dropped
// by an overflow; every other assignment was taken by the send loop and may have reached the
// worker.
func (o *outbox) closeUnsent() map[job.LeaseRef]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	unsent := make(map[job.LeaseRef]bool)
	for _, ref := range append(o.dropped, assignedIn(o.msgs)...) {
		unsent[ref] = true
	}
	o.msgs, o.bytes, o.largest, o.dropped, o.closed = nil, 0, 0, nil, true
	o.wake()
	return unsent
}

// withdraw takes the assignments that still wait out of the outbox, so that they are never
// sent, and returns their leases with those an overflow dropped: the assignments that never
// left. What else waits is still sent.
func (o *outbox) withdraw() []job.LeaseRef {
	o.mu.Lock()
	defer o.mu.Unlock()
	refs := append(o.dropped, assignedIn(o.msgs)...)
	o.dropped = nil
	kept := o.msgs[:0]
	o.largest = 0
	for _, m := range o.msgs {
		n := messageSize(m)
		if _, ok := m.(Assignment); ok {
			o.bytes -= n
			continue
		}
		kept = append(kept, m)
		o.largest = max(o.largest, n)
	}
	o.msgs = kept
	return refs
}

// assignedIn lists the leases the assignments among msgs hand out.
func assignedIn(msgs []Message) []job.LeaseRef {
	var refs []job.LeaseRef
	for _, m := range msgs {
		if a, ok := m.(Assignment); ok {
			refs = append(refs, job.LeaseRef{JobID: a.Job.ID, Token: a.Token})
		}
	}
	return refs
}

// size is how many bytes wait, and whether the outbox overflowed.
func (o *outbox) size() (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes, o.overflowed != nil
}

// next waits for queued messages and takes them all, with their estimated size. After an
// overflow it returns the ErrOutboxFull that says why.
func (o *outbox) next(ctx context.Context) ([]Message, int, error) {
	for {
		o.mu.Lock()
		if o.overflowed != nil {
			err := o.overflowed
			o.mu.Unlock()
			return nil, 0, err
		}
		if len(o.msgs) > 0 {
			msgs, n := o.msgs, o.bytes
			o.msgs, o.bytes, o.largest = nil, 0, 0
			o.mu.Unlock()
			return msgs, n, nil
		}
		closed, ended := o.closed, o.ended
		o.mu.Unlock()
		if closed {
			if ended != nil {
				return nil, 0, ended
			}
			return nil, 0, errSessionClosed
		}
		select {
		case <-o.notify:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}
