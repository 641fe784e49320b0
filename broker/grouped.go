package broker

import (
	"github.com/jobwire/jobwire/store"
)

// grouped gathers the writes of a batch that commit stores many to a statement: successes
// (tx.JobSucceedMany) and starts (tx.JobStartMany). On a store with a round trip per
// statement, a batch of N of them then costs two, not N. (A release stays an op of its own:
// with shared breakers it also settles its probe in the same transaction.)
type grouped struct {
	succeeding, starting []*op
	successes            []*store.JobFinishParams
	starts               []*store.JobStartParams
}

// reset empties g for another run of the transaction.
func (g *grouped) reset() {
	g.succeeding, g.starting = g.succeeding[:0], g.starting[:0]
	g.successes, g.starts = g.successes[:0], g.starts[:0]
}

// add takes o into the group of its write, and reports false for an op that writes alone
// (through apply). A superseded start writes nothing and is left to apply.
func (g *grouped) add(o *op) bool {
	switch {
	case o.succeed != nil:
		g.succeeding, g.successes = append(g.succeeding, o), append(g.successes, o.succeed)
	case o.start != nil && !o.superseded:
		g.starting, g.starts = append(g.starting, o), append(g.starts, o.start)
	default:
		return false
	}
	return true
}

// write stores what g gathered and sets each op's outcome.
func (g *grouped) write(tx store.Tx) error {
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
		succeeded, err := tx.JobSucceedMany(g.successes)
		if err != nil {
			return err
		}
		for i, o := range g.succeeding {
			o.succeeded = succeeded[i]
		}
	}
	return nil
}
