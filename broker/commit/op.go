// Package commit writes the broker's operations to its store, and tells each how its write
// ended only once that write's transaction is over: nothing is acknowledged before it is
// committed.
//
// An operation (Op) applies itself to a transaction and is told the outcome. Two writers run
// them: Grouped commits whatever operations are waiting in one transaction (group commit), and
// Plain commits them one per transaction, the reference Grouped is tested against. Grouped
// stores the operations of some kinds many to a statement; an operation says it is of such a
// kind by implementing an optional capability (Starter, Finisher, Succeeder, Inserter, Offerer,
// AtCommit), whose methods hand over what the statement needs and take back its answer. The
// writers are this package's only users of the store's at-commit writes (store.Tx's
// ...AtCommit methods).
//
// The package knows nothing of the broker: the owner of a writer (Owner) plans the dispatch
// round a batch carries and keeps the lock order of the rows a batch writes.
package commit

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Op is one unit of work for a writer.
type Op interface {
	// Name names the op's write for logs and counters.
	Name() string
	// Apply writes the op in tx, a transaction it may share with other ops. It may run more
	// than once (a retried or split batch), so it sets its results afresh each time.
	Apply(tx store.Tx) error
	// Done tells the op how its write ended: nil once it is committed. It runs on the writer's
	// goroutine, after the transaction ended, and must not block.
	Done(err error)
}

// Starter is an op that records an attempt's start. Grouped writes the starts of a batch in
// one statement, holds a start back one batch (at most StartWindow) for its lease's result to
// join it, and writes nothing for a start whose result is in the same batch (a Finisher of
// the same lease): the result's write records the attempt by itself, so a job that runs within
// one commit window costs one write, not two. Such a start is told it applied.
type Starter interface {
	Op
	// StartParams is the start's write; its Ref names the lease.
	StartParams() *store.JobStartParams
	// Started says whether the start applied, when it was written with others (or not at all).
	Started(applied bool)
}

// Finisher is an op that ends a lease (a result): a start of the same lease in its batch is
// superseded by it.
type Finisher interface {
	Op
	Finishes() job.LeaseRef
}

// Deferrer is a Finisher that may wait one batch (at most StartWindow) for a producer's next
// enqueue to share its commit. Grouped defers a batch made only of such results (and of starts)
// while a producer is enqueueing, that is within StartWindow of the last committed insert: a
// lone producer waits on each enqueue's commit, and the result that would otherwise be
// committed alone in between (a BEGIN, a COMMIT and its log writes more per job) rides the
// next one instead. A result is still answered only once committed.
type Deferrer interface {
	Finisher
	// MayWait says that nothing but the result's own answer waits on its commit: no job for the
	// slot it frees, no client following the job.
	MayWait() bool
}

// Succeeder is an op whose write may be a success stored with the batch's other successes in
// one statement the store may send with COMMIT (tx.JobSucceedManyAtCommit): nothing later in
// the transaction may depend on whether it applied.
type Succeeder interface {
	Op
	// Success is the success to store with others, or nil when the op must write alone.
	Success() *store.JobFinishParams
	// Succeeded says whether the success applied; unread, when not nil, is why the store could
	// not say (its answer, sent with COMMIT, was lost or unreadable).
	Succeeded(applied bool, unread error)
}

// Inserter is an op whose jobs may be inserted with the batch's other jobs in one statement
// (tx.JobInsertMany): jobs without idempotency keys (a key taken by a job of other content
// fails its enqueue alone).
type Inserter interface {
	Op
	// Insert is the jobs to insert with others, or nil when the op must write alone.
	Insert() []*store.JobInsertParams
	// Inserted hands over what became of each job, in tx, in order.
	Inserted(tx store.Tx, results []store.JobInsertResult)
}

// Offerer is an Inserter whose jobs may be leased by their own insert, each to the worker it is
// offered to (tx.JobInsertOfferedAtCommit).
type Offerer interface {
	Inserter
	// Offers has one entry per job of Insert, nil where the job is not offered; nil as a whole
	// when none is.
	Offers() []*store.JobOffer
	// Leased hands over the jobs the insert leased, one per job of Insert, nil where it did
	// not; it is called with nil before each write, and not again when the answer is lost.
	Leased(jobs []*job.Job)
}

// AtCommit is an op whose last statements are reads whose answers it wants only once the rest
// of its transaction is written (leases that take what is left, the breakers a lease left
// out): Grouped sends them with COMMIT, saving a round trip.
type AtCommit interface {
	Op
	// AtCommit is asked after Apply, in the same run of the transaction.
	AtCommit() Reads
}

// Reads are an AtCommit op's last reads. Each answer comes at the latest as the transaction
// ends; the op acts on it only once told the write committed (Done with nil).
type Reads struct {
	// ShutTypes are the types whose shut breakers (store.BreakerRecord.Shut) Shut receives.
	ShutTypes []string
	Shut      func([]store.BreakerRecord, error)
	// Leases are groups of leases of one scope each (store.SameLeaseScope), the first of a
	// group taking the first jobs in dispatch order; Leased receives group i's jobs.
	Leases [][]*store.JobLeaseParams
	Leased func(i int, jobs [][]*job.Job, err error)
}

// JobWriter is an op that writes jobs that exist already other than as a Starter or a
// Finisher (a release, a heartbeat's extensions): WritesJobs names them.
//
// A writer whose jobs other transactions may write at the same time (Config.LockJobs) locks
// every job its transaction writes before it applies any op (tx.JobLockRows, in id order): the
// ids of WritesJobs, of each Starter's lease and of each Finisher's. Its ops apply in the
// order they came, one-job writes first and the statements of many after, so without it the
// transaction would lock its jobs in that order, and another broker's transaction writing the
// same jobs in another order would deadlock with it.
type JobWriter interface {
	Op
	WritesJobs() []int64
}

// QueueLocker is an op that may lock queues' rows (a lease, a queue change): it applies after
// the batch's other ops and the owner's Flush, so that rows are locked in one order.
type QueueLocker interface {
	Op
	LocksQueues() bool
}

// Readier is an op that may make jobs ready (an enqueue): the writer asks its owner for a
// dispatch round with it, so that the commit that stores the jobs also leases them.
type Readier interface {
	Op
	Readies() bool
}

// BatchBound is an op that stands or falls with its batch: it is never written alone when the
// batch fails (a lease that counted the worker slots the batch's results free).
type BatchBound interface {
	Op
	BoundToBatch() bool
}

// Owner is what a writer asks of the code it writes for.
type Owner interface {
	// Round returns the op of a dispatch round to add to batch before it is written, or nil:
	// asked says the owner asked for one (Writer.Wake), ready that batch makes jobs ready.
	// Plain asks with no batch, after the op that made jobs ready committed. batch is the
	// writer's: Round must not keep it, nor may Begin or Written.
	Round(batch []Op, asked, ready bool) Op
	// Begin starts a run of batch's transaction tx (a transaction may run more than once).
	Begin(tx store.Tx, batch []Op)
	// Flush runs in tx once the ops that lock no queue applied, before those that do.
	Flush(tx store.Tx) error
	// Written says batch's write ended with err; its ops are told next.
	Written(batch []Op, err error)
}

// Writer runs ops. Submit and Enter may be called from any goroutine.
type Writer interface {
	// Submit queues o; o's Done is its only answer.
	Submit(o Op)
	// Enter queues o for a caller that waits on the returned ticket until deadline (zero:
	// none); storage retries of its batch stop at the earliest deadline of its callers.
	Enter(o Op, deadline time.Time) *Ticket
	// Wake asks for a dispatch round (Owner.Round with asked).
	Wake()
	// Queued is the number of ops queued and not yet taken.
	Queued() int
	// Run writes until Config.Stop is closed, then tells every op still queued
	// Config.Stopped. It returns when it is done.
	Run()
}

// Ticket states: a ticket is taken by the writer, or withdrawn by its caller, once.
const (
	queued int32 = iota
	taken
	withdrawn
)

// Ticket is an op queued for a writer, and its caller's hold on it.
type Ticket struct {
	op       Op
	deadline time.Time
	state    atomic.Int32
	answer   chan error // nil when nobody waits

	// Grouped's bookkeeping, on its goroutine: a start superseded by its result in the same
	// batch, and a start already held back once (see holdStarts).
	superseded, waited bool
	// traced: the op's entry was the traced request's (package stages).
	traced bool
}

// Traced reports whether t's op is the request being traced (package stages).
func (t *Ticket) Traced() bool { return t.traced }

// markIf marks p for a batch that holds the traced request's op (traced, from tracedIn).
func markIf(traced bool, p stages.Point) {
	if traced {
		stages.Mark(p)
	}
}

// tracedIn reports whether batch holds the traced request's op, when a trace is on.
func tracedIn(batch []*Ticket) bool {
	if !stages.Active() {
		return false
	}
	for _, t := range batch {
		if t.traced {
			return true
		}
	}
	return false
}

// Answer receives the op's outcome once its write ended.
func (t *Ticket) Answer() <-chan error { return t.answer }

// Withdraw marks t withdrawn by its caller, so that the writer drops it; false when the writer
// took it first (it may then be applied).
func (t *Ticket) Withdraw() bool { return t.state.CompareAndSwap(queued, withdrawn) }

// take marks t taken by the writer; false when its caller withdrew it first, so the writer
// drops it.
func (t *Ticket) take() bool {
	return t.state.CompareAndSwap(queued, taken) || t.state.Load() == taken
}

// done tells t's op and its caller how its write ended.
func (t *Ticket) done(err error) {
	t.op.Done(err)
	if t.answer != nil {
		t.answer <- err
	}
}

// ErrAnswerLost: a write sent with COMMIT whose answer never came (the connection was lost
// with it), though the transaction committed.
var ErrAnswerLost = errors.New("the store's answer to this write was lost; whether it was stored is not known")

// readies, locksQueues and boundToBatch report whether o has the capability and uses it.
func readies(o Op) bool {
	r, ok := o.(Readier)
	return ok && r.Readies()
}

func inserts(o Op) bool {
	_, ok := o.(Inserter)
	return ok
}

func locksQueues(o Op) bool {
	q, ok := o.(QueueLocker)
	return ok && q.LocksQueues()
}

func boundToBatch(o Op) bool {
	b, ok := o.(BatchBound)
	return ok && b.BoundToBatch()
}
