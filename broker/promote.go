package broker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/store"
)

// promoteRetry is how soon a promotion that failed is tried again.
const promoteRetry = time.Second

// promoter moves SCHEDULED jobs to PENDING as they come due. It keeps one alarm, set for the
// earliest due time it has been told of (schedule): by the writes that store a job SCHEDULED, by
// each promotion, which reads the next due time, and in a cluster by the other brokers' events.
// Only the leader promotes (in a cluster it promotes for every broker); a broker that is not
// arms nothing.
type promoter struct {
	service.Base
	cfg promoterConfig

	mu    sync.Mutex     // makes schedule's look at the alarm and its setting one step
	alarm *service.Alarm // the promotion at the earliest due time

	// Promoted is sent how many jobs each promotion made ready (tests).
	Promoted service.Signal[int]
}

// promoterConfig is what the promoter needs of the broker.
type promoterConfig struct {
	clk    clock.Clock
	log    *slog.Logger
	leader func() bool
	// promote stores, in one write, the promotion of the jobs due at now, and reads the next
	// due time. It returns ErrShuttingDown once the writer stopped.
	promote func(now time.Time) (n int, next time.Time, hasNext bool, err error)
	// ready is told that jobs became ready.
	ready func()
}

func newPromoter(cfg promoterConfig) *promoter {
	p := &promoter{cfg: cfg}
	p.alarm = service.NewAlarm(cfg.clk, func() { p.Do(p.run) })
	p.OnStop(p.alarm.Stop)
	return p
}

// Start starts the promoter and its alarm.
func (p *promoter) Start(ctx context.Context) error {
	if err := p.Base.Start(ctx); err != nil {
		return err
	}
	return p.alarm.Start(ctx)
}

// schedule makes sure the promoter wakes by at. It may be called with the broker's lock held.
func (p *promoter) schedule(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Running() || !p.cfg.leader() {
		return // in a cluster the leader promotes, whoever stored the job (the poll)
	}
	p.alarm.SetEarlier(at)
}

// disarm clears the alarm: when this broker stops leading its cluster.
func (p *promoter) disarm() { p.alarm.Clear() }

// armed reports whether the alarm is set, and for when.
func (p *promoter) armed() (bool, time.Time) {
	at, ok := p.alarm.Armed()
	return ok, at
}

// promoteNow promotes the jobs due now, off the alarm: when the broker becomes its cluster's
// leader and at every cluster poll. It waits for the promotion.
func (p *promoter) promoteNow() { p.Do(p.run) }

// run promotes the due jobs and sets the alarm for the next one. An alarm that fired is spent
// before run is called (service.Alarm), not once this promotion is done: a job that becomes
// SCHEDULED while the promotion below runs may commit after it read the next due time, and the
// schedule it calls must then set the alarm again rather than count on this one.
func (p *promoter) run() {
	if !p.cfg.leader() {
		return
	}
	n, next, hasNext, err := p.cfg.promote(p.cfg.clk.Now())
	switch {
	case errors.Is(err, ErrShuttingDown):
		// A promotion the leadership or the cluster poll started as the broker stopped.
	case err != nil:
		p.cfg.log.Error("promote scheduled jobs", "err", err)
		p.schedule(p.cfg.clk.Now().Add(promoteRetry))
	case hasNext:
		p.schedule(next)
	}
	if n > 0 {
		p.cfg.ready()
	}
	p.Promoted.Send(n)
}

// promoteDue stores the promotion of the SCHEDULED jobs due at now, through the writer, and
// reads the next due time.
func (b *Broker) promoteDue(now time.Time) (int, time.Time, bool, error) {
	var n int
	var next time.Time
	var hasNext bool
	err := b.do(b.ctx, "promote", func(tx store.Tx) error {
		var err error
		if n, err = tx.JobPromoteScheduled(now); err != nil {
			return err
		}
		if n > 0 {
			tx.Publish(readyEvent)
		}
		next, hasNext, err = tx.JobNextScheduledAt()
		return err
	})
	if err != nil {
		// What the write set is read only once it reported back: after an error (a stop, say)
		// it may still be running.
		return 0, time.Time{}, false, err
	}
	return n, next, hasNext, nil
}

// schedule makes sure SCHEDULED jobs due at at are promoted then (see promoter).
func (b *Broker) schedule(at time.Time) { b.svc.promoter.schedule(at) }
