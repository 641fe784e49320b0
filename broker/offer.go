package broker

import (
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/store"
)

// Offers. Each job of an enqueue the writer stores that a connected worker has room for is
// offered to that worker's stream: the insert itself leases it (commit.Offerer), in the
// writer's transaction, so the commit that stores the job hands it out without a dispatch
// round, its lease statement or, in a cluster, a notification to the other brokers. On SQLite
// the job's row is then written once, LEASED, where a round would write it PENDING, read it
// back and write it again. The store leases an offered job only when that goes ahead of no waiting job
// and past no pause, cap or shut breaker in the database; otherwise it stays PENDING and the
// round its write then asks for leases it, as any enqueue's job.
//
// An offer holds its worker's slot (Session.offered) from the moment it is planned until the
// write is settled, so the writer's rounds never hand the same slot out twice.
//
// Offers go through the writer, not the enqueue writer: on two CPUs a second connection writing
// at the same time made both connections' transactions slower (docs/performance-history.md).

// offer is the slot of one worker stream promised to one new job.
type offer struct {
	sess *Session
	store.JobOffer
}

// offer plans the offers of o, an enqueue of params the writer stores, when its jobs may join
// others' in one insert: jobs all offered need no round, and the other brokers of a cluster no
// word of them. Were one not leased after all, settleOffers asks for the round.
func (b *Broker) offer(o *enqueueOp, params []*store.JobInsertParams, now time.Time) {
	if !o.grouped {
		return
	}
	var all bool
	o.offers, all = b.planOffers(params, now)
	o.readies = o.readies && !all
}

// planOffers promises a slot to each job of params that a worker stream may take now, and
// returns the offers (nil entries for the jobs not offered), or nil when none is offered, and
// whether every job ready now has one. It offers nothing while some queue is capped, a cap's
// room being counted by the rounds alone, nor while the paused queues may hold a backlog, past
// which the store's check that no job waits ahead would read (countPausedBacklog).
func (b *Broker) planOffers(params []*store.JobInsertParams, now time.Time) (offers []*offer, all bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shuttingDown || len(b.queues.cappedQueues) > 0 || b.queues.backlog() || len(b.table.sessions) == 0 {
		return nil, false
	}
	all = true
	for i, p := range params {
		if p.RunAt.After(now) {
			continue
		}
		s := b.offerSessionLocked(p, now)
		if s == nil {
			all = false
			continue
		}
		if offers == nil {
			offers = make([]*offer, len(params))
		}
		s.offered++
		offers[i] = &offer{sess: s, JobOffer: store.JobOffer{WorkerID: s.workerID, Owner: s.owner,
			LeaseUntil: now.Add(b.cfg.LeaseDuration), Random: b.random, Queues: s.queues, Types: s.types}}
	}
	return offers, all && offers != nil
}

// offerSessionLocked picks the first stream in dispatch rotation order that takes p's job and
// has a slot and outbox room for it, and moves it to the back of the rotation. The dispatch
// rules decide (dispatchrule.MayOffer): none is picked for a job of a paused queue, or of a
// type whose breaker limits dispatch. Whether a job waits ahead of it is the store's to know.
func (b *Broker) offerSessionLocked(p *store.JobInsertParams, now time.Time) *Session {
	r := b.queues.queueRules[p.Queue]
	j := dispatchrule.Job{Type: p.Type, Queue: p.Queue, RunAt: p.RunAt}
	st := dispatchrule.State{Now: now, Queue: dispatchrule.Queue{Paused: r.paused, Cap: r.limit},
		Breaker: b.breakerStateLocked(p.Type, false), Workers: make([]dispatchrule.Worker, 1),
		RateCounted: b.svc.rates.counts(p.Type, p.Queue)}
	for i, s := range b.table.sessions {
		st.Workers[0] = s.asWorkerLocked(0)
		if !dispatchrule.MayOffer(j, st, false) {
			continue
		}
		if waiting, _ := s.out.size(); waiting+len(p.Payload) > OutboxGrantBytes {
			continue
		}
		b.toBackLocked(i)
		return s
	}
	return nil
}

// settleOffers ends the offers of batch's ops once their write ended with err: the jobs the
// insert leased are handed out (handOut, which hands back those it cannot deliver), and then
// the slots are let go. It reports whether a dispatch round is wanted: an offered job was left
// ready. The offers are dropped either way, so an op written again (split from a failed batch)
// is written as a plain enqueue that makes its jobs ready.
func (b *Broker) settleOffers(batch []commit.Op, err error) (round bool) {
	var offering []*enqueueOp
	for _, o := range batch {
		if e, ok := o.(*enqueueOp); ok && e.offers != nil {
			offering = append(offering, e)
		}
	}
	if offering == nil {
		return false
	}
	grants, round := offeredGrants(offering, err)
	if len(grants) > 0 {
		b.handOut(grants) // whether a round may find more is for rounds to ask
	}
	b.mu.Lock()
	for _, o := range offering {
		for _, of := range o.offers {
			if of != nil {
				of.sess.offered--
			}
		}
		o.offers, o.leased = nil, nil
	}
	b.mu.Unlock()
	return round
}

// offeredGrants gathers, per session, the jobs the inserts of offering leased once their write
// ended with err, and reports whether a round is wanted: an offered job was left ready.
func offeredGrants(offering []*enqueueOp, err error) (grants []*grant, round bool) {
	var bySess map[*Session]*grant
	for _, o := range offering {
		// Without the store's answer (lost with a COMMIT that went through) the jobs may be
		// leased or waiting: a round is asked for, and a leased one waits for its lease to run
		// out. A failed write may be split and its ops written again alone (commit.Grouped),
		// their jobs PENDING: they make their jobs ready as any enqueue does, and the round
		// asked for here runs after them.
		if err != nil || o.leased == nil {
			round = true
			o.readies = o.readies || err != nil
			continue
		}
		for i, j := range o.leased {
			if j == nil {
				round = round || o.offers[i] != nil
				continue
			}
			s := o.offers[i].sess
			g := bySess[s]
			if g == nil {
				if bySess == nil {
					bySess = make(map[*Session]*grant)
				}
				g = &grant{sess: s}
				bySess[s] = g
				grants = append(grants, g)
			}
			g.leased = append(g.leased, j)
		}
	}
	return grants, round
}
