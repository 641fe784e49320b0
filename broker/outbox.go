package broker

import (
	"context"
	"errors"
	"sync"
)

// errSessionClosed ends a session's send loop.
var errSessionClosed = errors.New("session closed")

// outbox queues messages for one worker stream. It never blocks the broker: the protocol
// bounds what can be queued (assignments by capacity, answers by the worker's own messages).
type outbox struct {
	mu     sync.Mutex
	msgs   []Message
	notify chan struct{}
	closed bool
}

func newOutbox() *outbox { return &outbox{notify: make(chan struct{}, 1)} }

func (o *outbox) push(m Message) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.msgs = append(o.msgs, m)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// next waits for queued messages and takes them all.
func (o *outbox) next(ctx context.Context) ([]Message, error) {
	for {
		o.mu.Lock()
		if len(o.msgs) > 0 {
			msgs := o.msgs
			o.msgs = nil
			o.mu.Unlock()
			return msgs, nil
		}
		closed := o.closed
		o.mu.Unlock()
		if closed {
			return nil, errSessionClosed
		}
		select {
		case <-o.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
