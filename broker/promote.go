package broker

import (
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

// promoter moves SCHEDULED jobs to PENDING as they come due. It keeps one timer, armed for the
// earliest due time it has been told of (schedule): by the writes that store a job SCHEDULED, by
// each promotion, which reads the next due time, and in a cluster by the other brokers' events.
// Only the leader promotes (in a cluster it promotes for every broker); a broker that is not
// arms nothing.
type promoter struct {
	service.Base
	cfg promoterConfig

	mu    sync.Mutex
	timer clock.Timer
	at    time.Time
	gen   uint64 // counts the timers armed; see run

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
	p.OnStop(p.disarm)
	return p
}

// schedule makes sure the promoter wakes by at. It may be called with the broker's lock held.
func (p *promoter) schedule(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.Running() || !p.cfg.leader() {
		return // in a cluster the leader promotes, whoever stored the job (the poll)
	}
	if p.timer != nil && !at.Before(p.at) {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.at = at
	p.gen++
	gen := p.gen
	p.timer = p.cfg.clk.AfterFunc(at.Sub(p.cfg.clk.Now()), func() { p.Do(func() { p.run(gen) }) })
}

// disarm stops the timer: at a stop, and when this broker stops leading its cluster.
func (p *promoter) disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// armed reports whether a timer is armed, and for when.
func (p *promoter) armed() (bool, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.timer != nil, p.at
}

// promoteNow promotes the jobs due now, off any timer: when the broker becomes its cluster's
// leader and at every cluster poll. It waits for the promotion.
func (p *promoter) promoteNow() { p.Do(func() { p.run(0) }) }

// run promotes the due jobs and arms the timer for the next one. gen names the timer that
// fired (0: none).
func (p *promoter) run(gen uint64) {
	// The timer is spent from the moment it fires, not once this promotion is done: a job that
	// becomes SCHEDULED while the promotion below runs may commit after it read the next due
	// time, and the schedule it calls must then arm a timer of its own rather than count on
	// this one. A newer timer armed meanwhile is left alone.
	p.mu.Lock()
	if p.gen == gen {
		p.timer = nil
	}
	p.mu.Unlock()
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
