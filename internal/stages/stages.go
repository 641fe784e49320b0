// Package stages times one request on its way through the broker, point by point, for the
// benchmark's breakdown of an enqueue and of an enqueue-to-start (jobwire-bench breakdown).
//
// The broker, the server and the benchmark mark the points below where they pass them. A
// mark lands in the Trace that Begin set, the first mark of each point winning; with no Trace
// set, which is always the case outside the breakdown, a mark costs one atomic load. Marks
// carry no request identity: the breakdown sends one request at a time and waits until
// everything it caused is done before the next, so the marks between Begin and End are that
// request's. The writer's marks, which other writes pass too, count only for the batch holding
// the op whose entry into the writer's queue was marked (commit.Ticket.Traced).
package stages

import (
	"sync/atomic"
	"time"
)

// Point is a place on the way of an enqueue and of the job it stores, in the order they are
// passed.
type Point uint8

const (
	// Call: the producer calls the client library's Enqueue.
	Call Point = iota
	// ClientSend: the client library hands the request to gRPC.
	ClientSend
	// Decoded: the server has read and decoded the request; its interceptors run next.
	Decoded
	// Handler: the server's Enqueue handler starts, past every interceptor.
	Handler
	// Queued: the broker hands the enqueue's write to the writer's queue.
	Queued
	// Taken: the writer takes it into a batch.
	Taken
	// CommitStart and CommitEnd: the batch's transaction, from its first statement to its
	// commit. A job that a worker has room for is leased in the same transaction.
	CommitStart
	CommitEnd
	// HandedOut: the committed lease is handed to the worker's session.
	HandedOut
	// StreamSend: the server writes the assignment to the worker's stream.
	StreamSend
	// WorkerRecv: the worker library has read the assignment from its stream.
	WorkerRecv
	// HandlerStart: the worker library starts the job's handler.
	HandlerStart
	// Answered: the broker's Enqueue hears that the write committed.
	Answered
	// Replied: the server's handler returns the response to gRPC.
	Replied
	// ClientRecv: gRPC hands the client library the decoded response.
	ClientRecv
	// Return: the client library's Enqueue returns to the producer.
	Return

	numPoints
)

var names = [numPoints]string{"call", "client send", "decoded", "handler", "queued", "taken", "commit start",
	"commit end", "handed out", "stream send", "worker recv", "handler start", "answered", "replied",
	"client recv", "return"}

func (p Point) String() string {
	if p >= numPoints {
		return "unknown"
	}
	return names[p]
}

// Trace holds the times one request passed each point, in nanoseconds since an arbitrary
// origin; 0 where it did not pass.
type Trace struct {
	at [numPoints]atomic.Int64
}

// current is the Trace marks land in; nil outside the breakdown.
var current atomic.Pointer[Trace]

// origin makes the marks monotonic: time.Since reads the monotonic clock.
var origin = time.Now()

// Mark records that the request being traced passed p now, unless it passed p before, and
// reports whether this mark was recorded.
func Mark(p Point) bool {
	if t := current.Load(); t != nil {
		return t.at[p].CompareAndSwap(0, int64(time.Since(origin))+1)
	}
	return false
}

// MarkAfter records that the request passed p now, as Mark does, but only once it passed prev:
// for a point other work passes too, such as the writer's queue, which the broker's own writes
// enter as well. A background write queued between Begin and the traced request's handler took
// the mark, which then came before the handler's, and the stage went unmeasured (seen under
// load on PostgreSQL, in TestBreakdownPassesEveryPoint).
func MarkAfter(prev, p Point) bool {
	if t := current.Load(); t != nil && t.at[prev].Load() != 0 {
		return t.at[p].CompareAndSwap(0, int64(time.Since(origin))+1)
	}
	return false
}

// Active reports whether a trace is on, for marks that first look for their request among
// others (the writer's batch).
func Active() bool { return current.Load() != nil }

// Begin starts tracing into a new Trace, which it returns; the previous one stops.
func Begin() *Trace {
	t := new(Trace)
	current.Store(t)
	return t
}

// End stops tracing.
func End() { current.Store(nil) }

// Between is the time from a to b, and false if either was not passed or b came first.
func (t *Trace) Between(a, b Point) (time.Duration, bool) {
	x, y := t.at[a].Load(), t.at[b].Load()
	if x == 0 || y == 0 || y < x {
		return 0, false
	}
	return time.Duration(y - x), true
}

// Passed reports whether the request passed p.
func (t *Trace) Passed(p Point) bool { return t.at[p].Load() != 0 }
