package broker

import (
	"slices"
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// SeparateEnqueueJobs is the size from which, in a cluster, an enqueue is written by the
// enqueue writer rather than the writer.
//
// The writer's transactions carry everything that must be ordered with dispatch: leases,
// starts, results. On PostgreSQL they spend most of their time in statements, one after
// another on one connection, so inserting a producer's large batches there makes every lease
// and result wait for them. The enqueue writer commits such batches on a connection of its
// own, group-committing the enqueues that arrive together, and then asks the writer for a
// dispatch round. A small enqueue stays with the writer, whose commit that stores it also
// leases it (by its own insert when a worker has a slot for it, see offer.go, or by a round
// planned into the same transaction), where the enqueue writer would make it wait for a second
// commit. Only a cluster's store takes concurrent writers (SQLite has one write transaction at
// a time), and only a cluster enforces queue caps and breakers in the database, which is what
// lets a lease run beside an insert.
const SeparateEnqueueJobs = 10

// enqueueBatches is the broker as the owner of the enqueue writer's batches. Nothing in them
// touches what only the writer may (breakers, dispatch): enqueues write jobs and queue rows
// only. A batch that made jobs ready asks the writer for a round once written.
type enqueueBatches struct{ b *Broker }

func (enqueueBatches) Round([]commit.Op, bool, bool) commit.Op { return nil }
func (enqueueBatches) Begin(store.Tx, []commit.Op)             {}
func (enqueueBatches) Flush(store.Tx) error                    { return nil }

func (o enqueueBatches) Written(batch []commit.Op, err error) {
	for _, op := range batch {
		if r, ok := op.(commit.Readier); ok && r.Readies() {
			o.b.signal()
			return
		}
	}
}

// enqueueOp stores an enqueue's jobs. Jobs without idempotency keys are inserted with the
// batch's others in one statement (commit.Inserter); those a worker has room for are offered
// to it, leased by their own insert (commit.Offerer, offer.go).
type enqueueOp struct {
	params []*store.JobInsertParams
	// grouped: no job has an idempotency or a unique key, so the insert may join others.
	grouped bool
	// readies: some job is ready now, so the writer plans a dispatch round into the same
	// transaction, and those jobs are leased by the commit that stores them.
	readies   bool
	scheduled time.Time // the earliest run_at of a job stored SCHEDULED
	results   []store.JobInsertResult
	// offers, when set, has one entry per job: the worker slot it is offered to, or nil (see
	// offer.go). leased are the jobs the insert leased, nil where it did not; nil as a whole
	// until the store answers.
	offers []*offer
	leased []*job.Job
}

func newEnqueueOp(params []*store.JobInsertParams, now time.Time) *enqueueOp {
	o := &enqueueOp{params: params}
	for _, p := range params {
		o.readies = o.readies || !p.RunAt.After(now)
		if p.RunAt.After(now) && (o.scheduled.IsZero() || p.RunAt.Before(o.scheduled)) {
			o.scheduled = p.RunAt
		}
	}
	// A keyed job is inserted by its own op, whose insert writes its key (and is never
	// offered: only a lease that counts its key's room may take it).
	o.grouped = !slices.ContainsFunc(params, func(p *store.JobInsertParams) bool {
		return p.Keyed() || p.Concurrency.Key != ""
	})
	return o
}

func (o *enqueueOp) Name() string  { return "enqueue" }
func (o *enqueueOp) Readies() bool { return o.readies }
func (o *enqueueOp) Done(error)    {}

func (o *enqueueOp) Apply(tx store.Tx) error {
	rs, err := tx.JobInsertMany(o.params)
	if err != nil {
		return err
	}
	o.Inserted(tx, rs)
	return nil
}

func (o *enqueueOp) Insert() []*store.JobInsertParams {
	if !o.grouped {
		return nil
	}
	return o.params
}

func (o *enqueueOp) Inserted(tx store.Tx, rs []store.JobInsertResult) {
	o.results = rs
	if o.readies {
		tx.Publish(readyEvent)
	}
	if !o.grouped && slices.ContainsFunc(o.params, func(p *store.JobInsertParams) bool { return p.Concurrency.Key != "" }) {
		tx.Publish(concurrencyEvent) // the other brokers' leases must honour its key
	}
	if !o.scheduled.IsZero() {
		tx.Publish(scheduledEvent(o.scheduled))
	}
}

func (o *enqueueOp) Offers() []*store.JobOffer {
	if o.offers == nil {
		return nil
	}
	offers := make([]*store.JobOffer, len(o.offers))
	for i, of := range o.offers {
		if of != nil {
			offers[i] = &of.JobOffer
		}
	}
	return offers
}

func (o *enqueueOp) Leased(jobs []*job.Job) { o.leased = jobs }
