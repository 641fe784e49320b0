package broker

import (
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/internal/stages"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Dispatch runs on the writer goroutine (writer.go): whenever something may have made work
// possible (a job became ready, a worker freed capacity or connected, a breaker let probes
// through), the writer plans a round and adds its lease to the transaction it is about to
// commit. A job enqueued into an idle broker is therefore leased by the very commit that stores
// it, and because only the writer plans, two rounds never hand out the same free capacity.

// grant is one lease request of a round: up to limit jobs of types for one session.
type grant struct {
	sess   *Session
	params store.JobLeaseParams
	// permits are a probe grant's, one per leased job in order: a shared breaker's slots are
	// taken by the lease (leaseProbes), a broker's own by handOut.
	permits []breaker.Permit
	probe   bool
	// A probe grant sets aside reserved of its session's free slots; those its lease leaves
	// unused go to open, the session's grant of the round for its other types, whose own
	// slots are free (leaseOp): a type with no job waiting keeps no worker's slot. planned is
	// free as the round planned it, where each run of the round's transaction starts.
	reserved, free, planned int
	open                    *grant
	leased                  []*job.Job
	failed                  error // the store refused this grant alone
}

// round is one dispatch round as planRound builds it, session by session.
type round struct {
	now  time.Time
	plan queuePlan // paused queues are never leased from; a capped one while its room lasts
	// breakers are the types' breakers, asked for once per round, not once per session; the
	// probe room of a HALF_OPEN one is counted down as the round's probe grants take it.
	breakers map[string]dispatchrule.Breaker
	limited  bool // some type's breaker holds dispatch back
	full     bool // some session had no room: jobs for it may be waiting
	grants   []*grant
}

// planRound decides what to lease to every session with free capacity. It runs on the writer
// goroutine only. Unless force (the batch being committed makes jobs ready), it plans nothing
// when no job may be waiting. freed are the slots, per session, that the batch the round joins
// frees (freedSlots): the batch answers its results before it hands out its lease, so a
// worker's slot stays busy for the one commit that stores its result, not for that commit and
// the next round's.
func (b *Broker) planRound(force bool, freed map[*Session]int) []*grant {
	if !b.writing.readyMaybe.Load() && !force {
		return nil
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shuttingDown {
		return nil
	}
	r := &round{now: now, plan: b.planQueuesLocked(), breakers: make(map[string]dispatchrule.Breaker)}
	n := len(b.table.sessions)
	for i := range n {
		s := b.table.sessions[i]
		b.planSessionLocked(r, s, s.asWorkerLocked(freed[s]))
	}
	// Rotate so that no session is always first to take scarce jobs.
	if n > 1 {
		b.toBackLocked(0)
	}
	// Only a round that offers every session room, under no breaker or cap that holds jobs
	// back, sees the whole ready set: if its grants then come back short (handOut), no job is
	// waiting until something makes one ready (signal). After any other round, freed capacity
	// alone may let waiting jobs through, so the next one must look.
	// Jobs a rate limit holds back wait for the alarm the lease arms (rateLimits.held).
	// A round the batch's new jobs force that does not see them all (a session without room,
	// taken by the batch's offers, or a breaker) must leave word that they wait, or the slots
	// freed later would look for none.
	if len(r.grants) > 0 && !r.full && !r.limited && len(r.plan.capped) == 0 && !b.svc.keys.active() {
		b.writing.readyMaybe.Store(false)
	} else if force {
		b.writing.readyMaybe.Store(true)
	}
	b.armBreakerTimerLocked()
	return r.grants
}

// planSessionLocked adds to r the grants of session s, seen as worker w: a probe grant per
// HALF_OPEN type it serves, and one grant for the types whose breakers let everything through.
func (b *Broker) planSessionLocked(r *round, s *Session, w dispatchrule.Worker) {
	if w.Closed {
		return
	}
	waiting, _ := s.out.size()
	if w.Free <= 0 || waiting >= OutboxGrantBytes {
		r.full = true
		return
	}
	// The jobs of one round wait in the session's outbox until its worker reads them.
	maxBytes := OutboxGrantBytes - waiting
	var open []string
	var probes []*grant // the session's probe grants
	for _, t := range w.Types {
		br := r.breakerLocked(b, t)
		switch {
		case br.State == dispatchrule.Closed:
			open = append(open, t)
		case dispatchrule.BreakerReason(br) != dispatchrule.None:
			r.limited = true
		case w.Free > 0:
			r.limited = true
			if g := b.probeGrantLocked(r, s, t, &w, maxBytes); g != nil {
				probes = append(probes, g)
			}
		default:
			r.limited = true
		}
	}
	if len(open) == 0 {
		return
	}
	// One grant over every queue the session serves that is neither paused nor capped
	// without room. The store leases across them in priority order and takes a capped
	// queue's jobs only while the round's room for it lasts (Caps: one map, shared by the
	// round's grants in the order they run), so a capped queue never goes ahead of a more
	// urgent job of another queue.
	// Made even when the probes set every free slot aside: what they leave unused is its.
	reserved := 0
	for _, p := range probes {
		reserved += p.reserved
	}
	scope, _ := dispatchScope(s, r.plan)
	if scope == nil || w.Free+reserved <= 0 {
		return
	}
	g := &grant{sess: s, params: b.leaseParams(s, open, w.Free, r.now, false), free: w.Free, planned: w.Free}
	r.scoped(g, scope, maxBytes)
	for _, p := range probes {
		p.open = g
	}
}

// breakerLocked is the state of t's breaker for round r, read once per round.
func (r *round) breakerLocked(b *Broker, t string) dispatchrule.Breaker {
	br, seen := r.breakers[t]
	if !seen {
		br = b.breakerStateLocked(t, false)
		r.breakers[t] = br
	}
	return br
}

// probeGrantLocked is a grant of probes of type t to session s, seen as worker w, whose free
// slots it sets aside: nil when s serves no queue that is neither paused nor full.
//
// A probe may come from any queue the session serves that is not paused and has room. It takes
// a capped queue's room only for a job it leases there: the store counts the room down as it
// leases (Caps, the map the round's grants share, in the order they run; in a cluster, the
// database's count). Set aside here, in every capped queue the session serves, the room went
// unused whenever the type had no job waiting, round after round: a queue capped at 1 ran
// nothing while any type its workers serve was HALF_OPEN. Nor is a probe slot taken before a
// job is found (handOut takes it), so a HALF_OPEN breaker whose type has no job waiting is left
// as it is, its slots free for the first job that comes.
func (b *Broker) probeGrantLocked(r *round, s *Session, t string, w *dispatchrule.Worker, maxBytes int) *grant {
	scope, _ := dispatchScope(s, r.plan)
	if scope == nil {
		return nil
	}
	br := r.breakers[t]
	limit := min(br.ProbeRoom, w.Free)
	g := &grant{sess: s, probe: true, reserved: limit}
	br.ProbeRoom -= limit
	r.breakers[t] = br
	w.Free -= limit
	g.params = b.leaseParams(s, []string{t}, limit, r.now, true)
	r.scoped(g, scope, maxBytes)
	return g
}

// scoped limits g to scope and maxBytes, lets it count the capped queues' room down, and adds
// it to the round.
func (r *round) scoped(g *grant, scope *queueScope, maxBytes int) {
	g.params.MaxBytes = maxBytes
	scope.apply(&g.params)
	if len(r.plan.capped) > 0 {
		g.params.Caps = r.plan.room
	}
	r.grants = append(r.grants, g)
}

// toBackLocked moves the i-th session to the back of the dispatch rotation, in place.
func (b *Broker) toBackLocked(i int) {
	s := b.table.sessions[i]
	copy(b.table.sessions[i:], b.table.sessions[i+1:])
	b.table.sessions[len(b.table.sessions)-1] = s
}

// leaseOp leases what a round's grants plan and hands the jobs out once that is committed. If
// a grant got all it asked for, there may be more: another round is asked for. It locks capped
// queues and reads the stored breakers: it applies after the batch's breakers, its probe types'
// among them, are locked and stored (commit.QueueLocker, breakerBatch).
type leaseOp struct {
	b      *Broker
	grants []*grant
	probes []string // the probe grants' types, whose breakers the batch locks before the lease
	leased []string // the other grants' types, whose shut breakers the lease's statement left out
	// usesFreed marks a round that counted the slots its batch's results free (freedSlots): it
	// stands or falls with its batch and is never written alone.
	usesFreed bool

	ch       breakerChanges        // shared breakers read or changed
	shut     []store.BreakerRecord // of leased, read as the lease commits
	atCommit [][]*grant            // the grants that lease at commit, one group per scope
}

func (b *Broker) newLeaseOp(grants []*grant) *leaseOp {
	o := &leaseOp{b: b, grants: grants}
	for _, g := range grants {
		if g.probe {
			o.probes = append(o.probes, g.params.Types[0])
		} else if g.params.ExcludeShut {
			o.leased = append(o.leased, g.params.Types...)
		}
	}
	slices.Sort(o.leased)
	o.leased = slices.Compact(o.leased)
	return o
}

func (o *leaseOp) Name() string         { return "lease" }
func (o *leaseOp) LocksQueues() bool    { return true }
func (o *leaseOp) BoundToBatch() bool   { return o.usesFreed }
func (o *leaseOp) probeTypes() []string { return o.probes }

// Apply leases the grants that do not lease at commit, each alone.
//
// The leases, those at commit too, are dated as the transaction takes them, not when the
// round was planned: the round may wait for its transaction (another broker holding a
// breaker's lock, the storage's retries) while the clock moves on, and the stored breakers
// that let its probes through are read in the transaction, as of then (flushBreakers). Dated
// by the plan, a lease could be stored run out already: the leader's next sweep takes its job
// back, and a probe's slot with it, while its worker is handed the job, and another broker
// leases the job as a second probe. Each apply (a retried batch runs it again) dates them anew.
func (o *leaseOp) Apply(tx store.Tx) error {
	o.ch.reset()
	o.shut = nil
	now := o.b.now()
	for _, g := range o.grants {
		// An apply may run again (a retried batch): it starts from the plan, the slots the
		// probes gave back (giveBack) in the failed run not counted again.
		g.leased, g.failed = nil, nil
		g.params.Now, g.params.LeaseUntil = now, now.Add(o.b.cfg.LeaseDuration)
		if g.open != nil {
			g.open.free = g.open.planned
			g.open.params.Limit = limitOf(g.open.free)
		}
	}
	// Once a grant comes back short, every ready job of its scope is taken: a later grant
	// of another session with the same scope would find nothing, so it is not asked.
	var drained map[string]bool
	for _, g := range o.grants {
		if g.atCommit() || g.params.Limit <= 0 {
			continue
		}
		scope := leaseScope(&g.params)
		if drained[scope] {
			g.giveBack()
			continue
		}
		if err := o.leaseAlone(tx, g); err != nil {
			return err
		}
		if g.failed != nil {
			continue
		}
		g.giveBack()
		if !g.full() {
			if drained == nil {
				drained = make(map[string]bool)
			}
			drained[scope] = true
		}
	}
	return nil
}

// leaseAlone leases g's jobs in tx. One grant that cannot be stored (a statement the store
// refuses, say) must not keep the round's other sessions from their jobs: it fails alone
// (g.failed).
func (o *leaseOp) leaseAlone(tx store.Tx, g *grant) error {
	home := o.b.mode.breakers()
	var gch breakerChanges
	err := tx.Isolated(func() error {
		gch.reset()
		if g.probe {
			if handled, err := home.leaseProbes(tx, &gch, g); handled {
				return err
			}
		}
		jobs, err := tx.JobLease(&g.params)
		g.leased = jobs
		return err
	})
	if ie := (*store.IsolatedError)(nil); errors.As(err, &ie) {
		g.leased, g.failed = nil, ie.Err
		if g.probe {
			home.probesNotLeased(g)
		}
		return nil
	}
	if err != nil {
		return err
	}
	o.ch = append(o.ch, gch...)
	return nil
}

// AtCommit asks for the reads nothing in the transaction depends on. A cache that says CLOSED
// while the stored breaker is shut (another broker opened it) lets grants through that the
// lease then leaves out: reading the shut ones with the lease puts the cache right, and a round
// may probe them. The grants that lease at commit (atCommit) come after the probes, whose
// unused slots they may take; their failure fails the batch, not one grant alone.
func (o *leaseOp) AtCommit() commit.Reads {
	var r commit.Reads
	if len(o.leased) > 0 {
		r.ShutTypes = o.leased
		r.Shut = func(recs []store.BreakerRecord, _ error) { o.shut = recs }
	}
	o.atCommit = atCommitGroups(o.grants)
	for _, gs := range o.atCommit {
		ps := make([]*store.JobLeaseParams, len(gs))
		for i, g := range gs {
			ps[i] = &g.params
		}
		r.Leases = append(r.Leases, ps)
	}
	r.Leased = o.leasedAtCommit
	return r
}

// leasedAtCommit takes the answer of the at-commit leases of group i.
func (o *leaseOp) leasedAtCommit(i int, jobs [][]*job.Job, err error) {
	for k, g := range o.atCommit[i] {
		g.leased, g.failed = nil, err
		if err == nil {
			g.leased = jobs[k]
		}
	}
}

// Done hands the leased jobs out, or gives the probe permits back when nothing was leased.
func (o *leaseOp) Done(err error) {
	b := o.b
	if err != nil {
		b.log.Error("lease jobs", "err", err)
		b.writing.readyMaybe.Store(true) // the jobs are still waiting
		b.mu.Lock()
		for _, g := range o.grants {
			for _, p := range g.permits {
				b.permitRelease(p)
			}
		}
		b.mu.Unlock()
		return
	}
	for _, g := range o.grants {
		if g.failed != nil {
			b.log.Error("lease jobs for one worker stream", "session", g.sess.id, "worker", g.sess.workerID, "err", g.failed)
			b.writing.readyMaybe.Store(true) // its jobs are still waiting
		}
		b.svc.rates.held(g.params.Rates)
	}
	b.applyBreakerChanges(o.ch)
	if len(o.shut) > 0 {
		if err := b.cacheBreakers(o.shut); err != nil {
			b.log.Error("cache breaker state", "err", err)
		}
	}
	if b.handOut(o.grants) {
		b.signal()
	}
}

// giveBack gives the slots probe grant g set aside and did not lease to its session's grant for
// the other types, which leases after it.
func (g *grant) giveBack() {
	if g.open != nil && len(g.leased) < g.reserved {
		g.open.free += g.reserved - len(g.leased)
		g.open.params.Limit = limitOf(g.open.free)
	}
}

// atCommit reports whether g leases at commit (leaseOp.AtCommit): outside a probe, with no
// queue cap to count down and no rate limit to take from.
func (g *grant) atCommit() bool { return !g.probe && g.params.SkipCapped && g.params.Rates == nil }

// atCommitGroups are the grants that lease at commit, one group per scope: nothing in the
// transaction depends on what they take (no cap to count down, no probe slot to take), so the
// store may send them with COMMIT, in one statement for every worker stream of a scope.
func atCommitGroups(grants []*grant) [][]*grant {
	var groups [][]*grant
	var byScope map[string]int // none on a store alone, whose leases never go at commit
	for _, g := range grants {
		if !g.atCommit() || g.params.Limit <= 0 {
			continue
		}
		sc := leaseScope(&g.params)
		i, ok := byScope[sc]
		if !ok {
			if byScope == nil {
				byScope = make(map[string]int)
			}
			i = len(groups)
			byScope[sc] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], g)
	}
	return groups
}

// queueScope is the queues one grant may lease from: Queues when the session names its
// queues (never empty: empty would mean every queue), else every queue but Exclude and, with
// excludePaused, the paused ones.
type queueScope struct {
	queues        []string
	exclude       []string
	excludePaused bool
}

func (sc *queueScope) apply(p *store.JobLeaseParams) {
	p.Queues, p.ExcludeQueues, p.ExcludePaused = sc.queues, sc.exclude, sc.excludePaused
}

// takesWorkLocked reports whether the dispatcher offers the session jobs at all: it is not
// draining or closed, and its worker reads its stream.
func (s *Session) takesWorkLocked() bool {
	if s.draining || s.closed {
		return false
	}
	_, overflowed := s.out.size()
	return !overflowed
}

// serves reports whether the session takes jobs of queue.
func (s *Session) serves(queue string) bool {
	return len(s.queues) == 0 || slices.Contains(s.queues, queue)
}

// dispatchScope is the session's queues that are not paused and not capped without room, and
// the capped queues with room among them. Its cost grows with the session's queues and the
// capped queues, never with the paused ones.
func dispatchScope(s *Session, plan queuePlan) (*queueScope, []string) {
	full := plan.full
	var scope *queueScope
	if len(s.queues) == 0 {
		scope = &queueScope{excludePaused: plan.anyPaused}
		for _, q := range plan.capped {
			if full(q) {
				scope.exclude = append(scope.exclude, q)
			}
		}
	} else {
		var qs []string
		for _, q := range s.queues {
			if !plan.paused(q) && !full(q) {
				qs = append(qs, q)
			}
		}
		if len(qs) > 0 {
			scope = &queueScope{queues: qs}
		}
	}
	var roomy []string
	for _, q := range plan.capped {
		if !full(q) && s.serves(q) {
			roomy = append(roomy, q)
		}
	}
	return scope, roomy
}

// leaseParams asks for up to limit jobs, rounded down to a power of two: the store writes the
// limit into its statement, and a few distinct statements stay compiled. A grant that gets all it
// asked for is followed by another round (handOut), which takes the rest. A probe's lease takes
// jobs of a type whose breaker is shut: that is what the probe lets through. The lease is
// dated now; a round's lease dates it again as its transaction takes it (leaseOp.Apply).
// Call it with b.mu held.
func (b *Broker) leaseParams(s *Session, types []string, limit int, now time.Time, probe bool) store.JobLeaseParams {
	return store.JobLeaseParams{
		Types:      types,
		Queues:     s.queues,
		Limit:      limitOf(limit),
		WorkerID:   s.workerID,
		Owner:      s.owner,
		Now:        now,
		LeaseUntil: now.Add(b.cfg.LeaseDuration),
		Random:     b.random,
		// In a cluster the database's pauses and caps, over every broker's leases, decide, and
		// so do its breakers: a cache that says CLOSED may not know yet that another broker
		// opened one. While no queue is known to be capped, the lease leaves out the jobs of
		// any queue the database says is (one capped meanwhile): it then needs no count of
		// room (see replaceQueueRulesLocked).
		EnforceQueues: b.mode.sharedQueues(),
		SkipCapped:    b.mode.sharedQueues() && len(b.queues.cappedQueues) == 0 && !b.svc.keys.active(),
		ExcludeShut:   b.sharedBreakers() && !probe,
		PausedBacklog: b.queues.backlog(),
		Keyed:         b.svc.keys.active(),
		Rates:         b.svc.rates.lease(),
	}
}

// limitOf is a lease's limit for n free slots: n rounded down to a power of two (leaseParams),
// 0 for none.
func limitOf(n int) int {
	if n <= 0 {
		return 0
	}
	return 1 << (bits.Len(uint(n)) - 1)
}

// handOut turns leased jobs into assignments. Jobs for a session that closed meanwhile, or of
// a type whose breaker opened meanwhile, are handed back.
func (b *Broker) handOut(grants []*grant) bool {
	if stages.Active() && slices.ContainsFunc(grants, func(g *grant) bool { return len(g.leased) > 0 }) {
		stages.Mark(stages.HandedOut) // a round that leased nothing hands nothing out
	}
	more := false
	var back []heldProbe // jobs handed back, with the permits of probes
	b.mu.Lock()
	// Alone, pauses and caps are checked again against the leases held (mayHandOutLocked); in
	// a cluster the lease's statement checked them, so the leases are not counted.
	alone := !b.mode.sharedQueues()
	var held map[string]int
	if alone {
		held = b.heldByQueueLocked()
	}
	for _, g := range grants {
		if g.full() && !g.probe {
			more = true
		}
		if g.probe {
			b.mode.breakers().takeProbePermitsLocked(g)
		}
		for i, j := range g.leased {
			if h, ok := b.handOneLocked(g, i, j, held); ok {
				back = append(back, h)
			}
		}
		if g.probe && len(g.permits) > len(g.leased) {
			for _, p := range g.permits[len(g.leased):] {
				b.permitRelease(p)
			}
		}
	}
	// The probes taken above each have a moment their slot times out.
	b.armBreakerTimerLocked()
	b.mu.Unlock()
	if len(back) > 0 {
		// handOut runs on the writer goroutine, which must not wait on its own queue.
		go b.submit(&handBackOp{b: b, back: back, failed: "could not hand back leased jobs"})
	}
	return more
}

// takeProbePermitsLocked takes a broker's own probe slots for the jobs probe grant g found:
// none for a type that has no job waiting. Only the writer's goroutine takes slots, so the
// planned allowance is still free, unless a probe's failure reopened the breaker meanwhile; a
// job without a slot goes back.
func (b *Broker) takeProbePermitsLocked(g *grant) {
	g.permits = nil
	for range g.leased {
		p, ok := b.breakers.Acquire(g.params.Types[0])
		if !ok {
			break
		}
		g.permits = append(g.permits, p)
	}
}

// handOneLocked hands j, g's i-th leased job, to g's session, or returns it to hand back (true).
// held counts the leases of each capped queue when the broker is alone (nil in a cluster).
func (b *Broker) handOneLocked(g *grant, i int, j *job.Job, held map[string]int) (heldProbe, bool) {
	ref := job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
	if b.takeRacedCancelLocked(ref) {
		// Cancelled after this lease committed: the job stays CANCELLED and no worker hears
		// of it.
		if g.probe && i < len(g.permits) {
			b.permitRelease(g.permits[i])
		}
		return heldProbe{}, false
	}
	if held != nil && !b.mayHandOutLocked(j.Queue, held) {
		// The queue was paused, or its cap lowered, while this lease was stored.
		if g.probe && i < len(g.permits) {
			b.permitRelease(g.permits[i])
		}
		return heldProbe{ref: ref, typ: j.Type, permit: probePermit(g, i)}, true
	}
	permit, ok := b.permitLocked(g, i, j.Type)
	if !ok {
		return heldProbe{ref: ref, typ: j.Type}, true
	}
	if g.sess.closed {
		b.permitRelease(permit)
		return heldProbe{ref: ref, typ: j.Type, permit: permit}, true
	}
	b.deliverLocked(g.sess, ref, j, permit, held)
	return heldProbe{}, false
}

// permitLocked is the breaker permit of g's i-th leased job, of type typ; false when it has
// none and must go back.
func (b *Broker) permitLocked(g *grant, i int, typ string) (breaker.Permit, bool) {
	switch {
	case g.probe && i >= len(g.permits):
		// The breaker reopened, or another probe took the slot, since the round.
		return breaker.Permit{}, false
	case g.probe:
		return g.permits[i], true
	case b.breakers != nil:
		return b.breakers.Acquire(typ)
	}
	return breaker.Permit{}, true
}

// leasePayloadKept is the largest payload a lease keeps with its job (deliverLocked).
const leasePayloadKept = 1 << 10

// deliverLocked records the lease of j and queues its Assignment on sess's stream. j is the
// hand-out's own (the lease's read, or the job built from an offered insert), and neither the
// lease nor the stream changes it: the Assignment carries it, and the lease keeps it too when
// its payload is small. A lease lives as long as its attempt, so past leasePayloadKept it
// keeps a copy without the payload, which may be megabytes; below, the copy (half a kilobyte
// a job) would cost more than the payload it lets go.
func (b *Broker) deliverLocked(sess *Session, ref job.LeaseRef, j *job.Job, permit breaker.Permit, held map[string]int) {
	kept := j
	if len(j.Payload) > leasePayloadKept {
		c := *j
		c.Payload = nil
		kept = &c
	}
	l := &lease{sess: sess, ref: ref, job: kept, attempt: j.Attempts + 1, permit: permit, deadline: j.LeaseExpiresAt,
		fresh: true}
	sess.held[j.ID] = l
	b.table.leases[j.ID] = l
	if r := b.queues.queueRules[j.Queue]; held != nil && r.limit > 0 {
		held[j.Queue]++
	}
	b.traceDelivery(kept, l.attempt, sess)
	sess.out.push(Assignment{Job: j, Attempt: l.attempt, Token: ref.Token,
		LeaseDeadline: j.LeaseExpiresAt, AttemptTimeout: j.AttemptTimeout})
}

// armBreakerTimerLocked keeps one timer armed for the moment time alone next changes what a
// breaker lets through (an OPEN breaker turning HALF_OPEN, a silent probe's slot timing out), so
// the writer runs a dispatch round then even if nothing else happens. Every round calls it, and
// so does every hand-out after taking its probe permits, so the timer follows NextChange whenever
// that moment moves, earlier or later; with no such moment pending the timer is stopped.
func (b *Broker) armBreakerTimerLocked() {
	if b.breakers != nil {
		b.svc.breakerWake.Set(b.breakers.NextChange())
	}
}

// leaseScope names the set of jobs a lease may take: the same types and queues.
func leaseScope(p *store.JobLeaseParams) string {
	// Names cannot hold a space or a "|" (server/validate.go), so the joins cannot collide.
	return strings.Join(p.Types, " ") + "|" + strings.Join(p.Queues, " ") + "|" +
		strings.Join(p.ExcludeQueues, " ") + "|" + strings.Join(p.ExcludeTypes, " ") + "|" +
		strconv.FormatBool(p.ExcludePaused)
}

// full reports whether g leased all it asked for, by count or by payload bytes (MaxBytes): only
// a grant that came back short took every ready job of its scope, and one that is full may
// have left jobs waiting.
func (g *grant) full() bool {
	if g.params.Limit <= 0 {
		return false // it asked for nothing (its probes took every slot)
	}
	if len(g.leased) >= g.params.Limit {
		return true
	}
	if g.params.MaxBytes <= 0 {
		return false
	}
	n := 0
	for _, j := range g.leased {
		n += len(j.Payload)
	}
	return n >= g.params.MaxBytes
}

// probePermit is the permit of g's i-th leased job if g leased probes.
func probePermit(g *grant, i int) breaker.Permit {
	if g.probe && i < len(g.permits) {
		return g.permits[i]
	}
	return breaker.Permit{}
}

// handBackOp hands jobs back to PENDING, releasing the shared probe slots they hold in the
// same write; failed is logged if it cannot be stored (the jobs then wait for their leases to
// expire).
type handBackOp struct {
	b      *Broker
	back   []heldProbe
	failed string
	ch     breakerChanges
}

func (o *handBackOp) Name() string        { return "release" }
func (o *handBackOp) WritesJobs() []int64 { return heldJobs(o.back) }

func (o *handBackOp) Apply(tx store.Tx) error {
	_, err := o.b.releaseHeld(tx, &o.ch, o.back)
	return err
}

// Done ends the leases a closed stream kept for the hand back (Session.Close). If the hand
// back failed, they stay LEASED until they expire and the sweeper returns them, as the
// leases of a stream that broke do.
func (o *handBackOp) Done(err error) {
	b := o.b
	if err != nil {
		b.log.Warn(o.failed, "jobs", len(o.back), "err", err)
	} else {
		b.applyBreakerChanges(o.ch)
	}
	b.mu.Lock()
	for _, h := range o.back {
		l := b.leaseLocked(h.ref)
		switch {
		case l == nil:
		case err == nil || b.mode.forgetsClosed():
			b.endLeaseLocked(l, permitReleased, 0)
		default:
			l.storing = endingNone
		}
	}
	b.mu.Unlock()
	if err == nil {
		b.signal()
	}
}
