package broker

import (
	"context"

	"github.com/jobwire/jobwire/store"
)

// ruleChange is a change of the rules dispatch applies (a queue's, a rate limit, a concurrency
// rule) made at run time: one write stores it, tells the other brokers, and records who did it.
type ruleChange struct {
	op    string // the write's name, as the writer and its faults know it
	locks bool   // the write may lock queues' rows (funcOp.locks)
	write func(store.Tx) error
	// announce is what the other brokers are told, so they read the rules again.
	announce []store.Event
	audit    store.AuditEvent
}

// storeRuleChange stores c in one write. The caller then applies it to its own copy of the
// rules, and asks for a dispatch round if the change may let held jobs go.
func (b *Broker) storeRuleChange(ctx context.Context, c ruleChange) error {
	return b.doOp(ctx, &funcOp{name: c.op, locks: c.locks, apply: func(tx store.Tx) error {
		if err := c.write(tx); err != nil {
			return err
		}
		for _, e := range c.announce {
			tx.Publish(e)
		}
		ev := c.audit
		return b.audit(ctx, tx, &ev)
	}})
}
