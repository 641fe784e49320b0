package broker

import (
	"errors"
	"slices"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// errAnswerLost: a write sent with COMMIT whose answer never came (the connection was lost
// with it), though the transaction committed.
var errAnswerLost = errors.New("the store's answer to this write was lost; whether it was stored is not known")

// grouped gathers the writes of a batch that commit stores many to a statement: successes
// (tx.JobSucceedMany), starts (tx.JobStartMany) and the jobs of enqueues without idempotency
// keys (tx.JobInsertMany). On a store with a round trip per statement, a batch of N of them
// then costs one or two, not N or 2N. (A release stays an op of its own: with shared breakers
// it also settles its probe in the same transaction. So does an enqueue with an idempotency
// key: a key taken by a job of other content fails that enqueue alone.)
type grouped struct {
	succeeding, starting, inserting []*op
	successes                       []*store.JobFinishParams
	starts                          []*store.JobStartParams
	inserts                         []*store.JobInsertParams
}

// reset empties g for another run of the transaction.
func (g *grouped) reset() {
	g.succeeding, g.starting, g.inserting = g.succeeding[:0], g.starting[:0], g.inserting[:0]
	g.successes, g.starts, g.inserts = g.successes[:0], g.starts[:0], g.inserts[:0]
}

// add takes o into the group of its write, and reports false for an op that writes alone
// (through apply). A superseded start writes nothing and is left to apply.
func (g *grouped) add(o *op) bool {
	switch {
	case o.insert != nil:
		g.inserting, g.inserts = append(g.inserting, o), append(g.inserts, o.insert...)
	case o.succeed != nil:
		g.succeeding, g.successes = append(g.succeeding, o), append(g.successes, o.succeed)
	case o.start != nil && !o.superseded:
		g.starting, g.starts = append(g.starting, o), append(g.starts, o.start)
	default:
		return false
	}
	return true
}

// apply runs batch in tx: the ops g groups are gathered and written together at the end, the
// others apply alone as they come. For ops that touch no breaker and lock no queue (the
// enqueue writer's); the writer's batches keep that lock order (applyBatch).
func (g *grouped) apply(tx store.Tx, batch []*op) error {
	g.reset()
	for _, o := range batch {
		if g.add(o) {
			continue
		}
		if err := o.apply(tx); err != nil {
			return err
		}
	}
	return g.write(tx)
}

// write stores what g gathered and sets each op's outcome.
func (g *grouped) write(tx store.Tx) error {
	if len(g.inserts) > 0 {
		results, err := g.insert(tx)
		if err != nil {
			return err
		}
		for _, o := range g.inserting {
			o.inserted(tx, results[:len(o.insert)])
			results = results[len(o.insert):]
		}
	}
	if len(g.starts) > 0 {
		started, err := tx.JobStartMany(g.starts)
		if err != nil {
			return err
		}
		for i, o := range g.starting {
			o.applied = started[i]
		}
	}
	if len(g.successes) > 0 {
		// Nothing later in the transaction depends on which successes apply: they touch no
		// breaker and free no queue room (Session.Result groups only those), so the store may
		// send them with COMMIT. A success whose answer cannot be read is refused as storage's
		// failure, and its worker sends it again.
		succeeding := g.succeeding
		for _, o := range succeeding {
			o.succeeded, o.unread = false, errAnswerLost
		}
		err := tx.JobSucceedManyAtCommit(g.successes, func(succeeded []bool, err error) {
			for i, o := range succeeding {
				o.succeeded, o.unread = err == nil && succeeded[i], err
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// insert stores the gathered jobs, leasing those offered to a worker (offer.go) if any are.
func (g *grouped) insert(tx store.Tx) ([]store.JobInsertResult, error) {
	if !slices.ContainsFunc(g.inserting, func(o *op) bool { return o.offers != nil }) {
		return tx.JobInsertMany(g.inserts)
	}
	offers := make([]*store.JobOffer, 0, len(g.inserts)) // one per job, nil where not offered
	for _, o := range g.inserting {
		o.leased = nil
		for i := range o.insert {
			var offer *store.JobOffer
			if o.offers != nil && o.offers[i] != nil {
				offer = &o.offers[i].JobOffer
			}
			offers = append(offers, offer)
		}
	}
	inserting := g.inserting
	return tx.JobInsertOfferedAtCommit(g.inserts, offers, func(leased []*job.Job, err error) {
		if err == nil {
			leasedOf(inserting, leased)
		}
	})
}
