package broker

import (
	"context"
	"errors"
)

// retentionTick deletes, on the leader (which deletes for every broker in a cluster), the
// finished jobs and the audit events past their retention. The retention service runs it every
// Retention.Interval.
func (b *Broker) retentionTick() {
	if !b.isLeader() {
		return
	}
	n, err := b.ApplyRetention(b.ctx)
	switch {
	case err != nil && !stopping(err):
		b.log.Error("delete jobs past retention", "deleted", n, "err", err)
	case n > 0:
		b.log.Info("deleted jobs past retention", "jobs", n)
	}
	n, err = b.ApplyAuditRetention(b.ctx)
	switch {
	case err != nil && !stopping(err):
		b.log.Error("delete audit events past retention", "deleted", n, "err", err)
	case n > 0:
		b.log.Info("deleted audit events past retention", "events", n)
	}
}

// stopping reports whether err only says the broker is stopping.
func stopping(err error) bool {
	return errors.Is(err, ErrShuttingDown) || errors.Is(err, context.Canceled)
}
