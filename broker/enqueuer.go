package broker

import (
	"time"

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

// enqueueLoop is the enqueue writer: it commits the enqueues waiting (up to MaxBatch) in one
// transaction, their jobs inserted together (grouped), then signals dispatch.
func (b *Broker) enqueueLoop() {
	defer b.stopped.Done()
	batch := make([]*op, 0, b.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case o := <-b.enqueues:
			if o.take() {
				batch = append(batch, o)
			}
		case <-b.stop:
			failPending(b.enqueues)
			return
		}
	fill:
		for len(batch) < b.cfg.MaxBatch {
			select {
			case o := <-b.enqueues:
				if o.take() {
					batch = append(batch, o)
				}
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			b.commitEnqueues(batch)
		}
	}
}

// commitEnqueues writes a batch of enqueues in one transaction and answers them. Nothing in
// it touches what only the writer may (breakers, dispatch): enqueues write jobs and queue
// rows only.
func (b *Broker) commitEnqueues(batch []*op) {
	var g grouped
	began := time.Now()
	err := b.st.Write(b.batchContext(batch), batchName(batch), func(tx store.Tx) error { return g.apply(tx, batch) })
	readies := false
	for _, o := range batch {
		readies = readies || o.readies
	}
	b.finish(batch, began, err, b.commitEnqueues, func(o *op) error { return b.st.Write(b.ctx, o.name, o.apply) })
	if readies {
		b.signal()
	}
}
