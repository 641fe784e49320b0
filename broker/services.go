package broker

import (
	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/service"
)

// services are the broker's background concerns, each a service.Service with its own state,
// lock and timer. New builds them; Start starts them in the order below and Shutdown stops them
// in two steps (see Shutdown): the timed ones as it begins, so that they start no new work,
// the ones the writer's work depends on once the writer has stopped.
//
// A new background concern (periodic jobs, say) is a field here, built in newServices and
// listed in timed or after.
type services struct {
	// Timed: they start work of their own, on a clock.
	promoter    *promoter         // SCHEDULED jobs due become PENDING (promote.go)
	sweep       *service.Periodic // expired leases and attempt timeouts (sweep.go)
	retention   *service.Periodic // finished jobs and audit events past retention (retention.go)
	breakerWake *service.Alarm    // a dispatch round when time alone changes a breaker (dispatch.go)
	queueReload *queueReloader    // the queue rules read again when they changed (queues.go)
	watches     *watchHub         // jobs producers wait for or follow, and their backstop (watch.go)
	schedules   *scheduler        // periodic schedules fired on the leader (schedules.go)

	// keys are the concurrency rules and their refresh in a cluster (keyconc.go).
	keys  *keyLimits
	rates *rateLimits // the rate limits known, a round when a bucket refills (ratelimit.go)

	// After the writer: it reports to them until it stops.
	breakerStore *breakerKeeper // breaker states stored, shared ones refreshed (breakerstore.go)
}

func newServices(b *Broker) *services {
	return &services{
		promoter: newPromoter(promoterConfig{clk: b.clk, log: b.log, leader: b.isLeader,
			promote: b.promoteDue, ready: b.signal}),
		sweep:       service.NewPeriodic(b.clk, b.cfg.SweepInterval, b.sweepTick),
		retention:   service.NewPeriodic(b.clk, b.cfg.Retention.Interval, b.retentionTick),
		breakerWake: service.NewAlarm(b.clk, b.signal),
		queueReload: newQueueReloader(b.clk, b.log, "queue settings", b.reloadQueueRules),
		watches:     newWatchHub(b),
		schedules: newScheduler(schedulerConfig{clk: b.clk, log: b.log, leader: b.isLeader, fire: b.fireSchedules},
			b.triager.Uniform),
		rates: newRateLimits(b.clk, b.signal),
		breakerStore: newBreakerKeeper(breakerKeeperConfig{st: b.st, clk: b.clk, log: b.log,
			snapshot: func() []breaker.Saved { return b.breakers.Snapshot() }, encode: b.encodeBreaker,
			shared: b.sharedBreakers, refresh: b.refreshBreakers}),
	}
}

// timed lists the services that start work on a clock, in the order they start.
func (s *services) timed() []service.Service {
	return []service.Service{s.breakerWake, s.rates.wake, s.queueReload, s.promoter, s.sweep, s.retention, s.watches, s.schedules}
}

// after lists the services that stop after the writer.
func (s *services) after() []service.Service {
	return []service.Service{s.breakerStore}
}
