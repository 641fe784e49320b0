package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/reach"
	"github.com/jobwire/jobwire/store/storeretry"
)

// A broker that cannot reach its database must not hold its callers until their deadlines while
// other brokers of the cluster could serve them. It watches its own writes (and a cluster
// store's heartbeat, see reachReporter) with a reach.Tracker: once the database has been
// silent for Options.DatabaseSilence while the broker waited on it, the broker is unreachable
// until the database answers again. Meanwhile:
//
//   - a call that waits on the writer is answered at once with an *UnreachableError, which
//     says whether its write may have been applied: not when the writer had not taken it yet
//     (it is withdrawn, see op.take), perhaps when it is in the transaction in flight;
//   - new calls are refused with an *UnreachableError saying nothing was applied;
//   - the server reports NOT_SERVING (WatchReach) and /readyz fails (Ready);
//   - once the silence has lasted another DatabaseSilence, the movable worker streams end
//     (ErrUnreachable), so that their workers reconnect to brokers that reach the database.
//
// Storage retries of short faults are untouched: a write that a retry completes within the
// bound never makes the broker unreachable, and the broker's own writes (dispatch, sweeps,
// worker results) go on, so that the first one to get through brings it back.

// DefaultDatabaseSilence is the jobwire command's Options.DatabaseSilence: long enough for a commit on a
// busy database, and for the retries of a short fault, short enough that a producer whose call
// reached a broker cut off from its database hears so in about a second and goes elsewhere.
const DefaultDatabaseSilence = time.Second

// ErrUnreachable is matched by the *UnreachableError of a broker that cannot reach its
// database, and ends its movable worker streams.
var ErrUnreachable = errors.New("the broker cannot reach its database")

// UnreachableError answers a call that a broker which cannot reach its database did not hold.
type UnreachableError struct {
	// Silent is how long the database has been silent.
	Silent time.Duration
	// MaybeApplied: the call's write was in a transaction whose outcome is not known; it may
	// have been stored. Otherwise nothing of the call was applied.
	MaybeApplied bool
}

func (e *UnreachableError) Error() string {
	if e.MaybeApplied {
		return fmt.Sprintf("%v (silent for %s); the call's write was sent and may or may not have been applied",
			ErrUnreachable, e.Silent.Round(time.Millisecond))
	}
	return fmt.Sprintf("%v (silent for %s); the call was not applied", ErrUnreachable, e.Silent.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrUnreachable) match.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// reachReporter is implemented by a store that reaches its database by itself (a cluster
// store's heartbeat), so that the broker hears of the database while no call of its own waits.
type reachReporter interface {
	ReportReach(t *reach.Tracker)
}

// reachStore is the broker's store, its writes watched by the tracker.
type reachStore struct {
	store.Store
	reach *reach.Tracker
}

func (s reachStore) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	c := s.reach.Begin()
	err := s.Store.Write(ctx, op, fn)
	c.End(writeOutcome(err))
	return err
}

// StorageRetries passes the store's retry counts on (see Stats).
func (s reachStore) StorageRetries() map[string]int64 {
	if c, ok := s.Store.(storageRetryCounter); ok {
		return c.StorageRetries()
	}
	return nil
}

// writeOutcome is what a write's error says of the database: the retries of a transient fault
// ran out, or the storage cannot be used, without an answer; the broker stopping says nothing;
// anything else (success, a conflict, a constraint) came from the database.
func writeOutcome(err error) reach.Outcome {
	switch {
	case err == nil:
		return reach.Answered
	case errors.Is(err, context.Canceled):
		return reach.Abandoned
	case errors.Is(err, storeretry.ErrBusy), errors.Is(err, store.ErrUnavailable):
		return reach.Unreached
	}
	return reach.Answered
}

// watchReach sets the tracker up, when silence bounds the broker's waits, on st and, when it
// reaches the database by itself, on cluster's store too.
func (b *Broker) watchReach(silence time.Duration, cluster store.Cluster) {
	if silence <= 0 {
		return
	}
	b.reach = reach.New(b.clk, silence)
	b.st = reachStore{Store: b.st, reach: b.reach}
	if r, ok := cluster.(reachReporter); ok {
		r.ReportReach(b.reach)
	}
	b.reach.Watch(b.onReach)
}

// Unreachable returns an *UnreachableError while the broker cannot reach its database, nil
// otherwise.
func (b *Broker) Unreachable() error {
	if b.reach == nil {
		return nil
	}
	since, down := b.reach.Down()
	if !down {
		return nil
	}
	return &UnreachableError{Silent: b.clk.Now().Sub(since)}
}

// WatchReach calls fn with true each time the broker stops reaching its database and with false
// each time it reaches it again, in order; fn must not block. A broker whose waits are not
// bounded (Options.DatabaseSilence zero) never calls it.
func (b *Broker) WatchReach(fn func(unreachable bool)) {
	if b.reach != nil {
		b.reach.Watch(fn)
	}
}

// lost is closed while the broker cannot reach its database; nil (never ready) when its waits
// are not bounded.
func (b *Broker) lost() <-chan struct{} {
	if b.reach == nil {
		return nil
	}
	return b.reach.Lost()
}

// unreached answers the caller of t, which stopped waiting on it because the database went
// silent: it withdraws t if the writer has not taken it, so that nothing of it is applied.
func (b *Broker) unreached(t *commit.Ticket) error {
	err := &UnreachableError{MaybeApplied: !t.Withdraw()}
	if since, down := b.reach.Down(); down {
		err.Silent = b.clk.Now().Sub(since)
	}
	return err
}

// onReach logs each change of the database's reach and, once it has been lost, arms the timer
// that moves the movable workers away.
func (b *Broker) onReach(down bool) {
	if !down {
		b.log.Info("the database answers again: taking calls")
		return
	}
	b.log.Warn("cannot reach the database: refusing calls until it answers", "silence", b.reach.Bound())
	since, down := b.reach.Down()
	if !down {
		return
	}
	// From the silence's start, not from now: this may run a while after it was lost.
	b.mu.Lock()
	if !b.shuttingDown {
		b.clk.AtFunc(since.Add(2*b.reach.Bound()), b.moveAwayUnreached)
	}
	b.mu.Unlock()
}

// moveAwayUnreached ends the movable worker streams, if the database is still silent, so that
// their workers reconnect to a broker that reaches it and keep their leases there.
func (b *Broker) moveAwayUnreached() {
	since, down := b.reach.Down()
	if !down {
		return
	}
	err := fmt.Errorf("%w (silent for %s): reconnect, to another broker", ErrUnreachable, b.clk.Now().Sub(since).Round(time.Millisecond))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shuttingDown {
		return
	}
	moved := 0
	for _, s := range b.table.sessions {
		if !s.movable || s.draining || s.closed {
			continue
		}
		s.draining = true
		s.out.closeWith(err)
		moved++
	}
	if moved > 0 {
		b.log.Warn("moved workers away: the database is silent", "workers", moved, "err", err)
	}
}
