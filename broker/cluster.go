package broker

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/triage"
)

// A broker built with a store.Cluster (Options.Cluster) shares its database with other brokers,
// any of which producers and workers may talk to. What must hold across brokers lives in the
// database; this file is how one broker takes part:
//
//   - Wake-ups. Every write that can make a job ready publishes store.EventReady in its
//     transaction (readyEvent, in the ops' apply functions), and so does one that holds a ready
//     job locked, which another broker's lease skips (SKIP LOCKED: a dependent's insert holds
//     its parents, store/postgres's parentStates). An event from another broker asks for a
//     dispatch round here, so a job enqueued on one broker reaches an idle worker on another at
//     once. A poll every ClusterPoll, and a round after any gap in the events (EventResync),
//     bound what a lost notification can delay.
//   - Leadership. Maintenance that must run once runs on the leader only (isLeader): promoting
//     scheduled jobs, the database sweep of expired leases and attempt timeouts, retention. A
//     broker that becomes leader runs promote and sweep at once. A job stored SCHEDULED through
//     any broker publishes store.EventScheduled, so the leader's timer wakes for it.
//   - Cancels. A cancel of a held job publishes store.EventCancel, and the broker whose worker
//     holds the lease tells it to stop.
//   - Leases. A broker knows only the leases it handed out or adopted. It never releases
//     another broker's leases (Start, Shutdown), adopts a reconnecting worker's leases from the
//     database (Open), and forgets the running leases of a closed stream, whose worker may come
//     back on any broker. A lease the leader expired is dropped here by the local sweep
//     (dropLostLeasesLocked); the database's fencing refuses its token meanwhile.

// DefaultClusterPoll is how often a broker in a cluster runs a dispatch round with no event
// asking for one, and its leader looks for scheduled jobs another broker stored.
const DefaultClusterPoll = time.Second

// readyEvent is what a write publishes when it may have made jobs ready.
var readyEvent = store.Event{Kind: store.EventReady}

// clustered is the mode of a broker that shares its database with other brokers.
type clustered struct {
	b       *Broker
	cluster store.Cluster
	poll    *service.Periodic // a dispatch round, promotion and rebalancing every ClusterPoll
	members *clusterLink      // the cluster's events and leadership
	isLead  atomic.Bool       // this broker leads the cluster
	// watchers hear the cluster's events (WatchCluster).
	watchers atomic.Pointer[[]func(store.Event)]
	moves    moves // moves of workers to other brokers (rebalance.go)
	alone    *local
	brk      breakerHome // shared through the database
}

func newClustered(b *Broker, c store.Cluster, poll time.Duration, self store.BrokerRecord) *clustered {
	m := &clustered{b: b, cluster: c, alone: &local{b: b, self: self}, brk: newBreakersInStore(b)}
	m.poll = service.NewPeriodic(b.clk, poll, m.pollTick)
	m.members = &clusterLink{m: m}
	m.moves.poll = poll
	return m
}

func (m *clustered) breakers() breakerHome          { return m.brk }
func (m *clustered) id() string                     { return m.cluster.BrokerID() }
func (m *clustered) leader() bool                   { return m.isLead.Load() }
func (m *clustered) timed() []service.Service       { return []service.Service{m.poll} }
func (m *clustered) after() []service.Service       { return []service.Service{m.members} }
func (m *clustered) sharedQueues() bool             { return true }
func (m *clustered) forgetsClosed() bool            { return true }
func (m *clustered) returned(w string, t time.Time) { m.moves.returned(w, t) }

// recover finds nothing to do: the leases in the database are other brokers' too, and this
// broker held none before it started. A killed broker's leases expire through the leader's
// sweep, and the leader promotes the scheduled jobs.
func (m *clustered) recover(store.Tx) (recovered, error) { return recovered{}, nil }

// concurrentWriters: every broker of the cluster writes the database's jobs.
func (m *clustered) concurrentWriters() bool { return true }

func (m *clustered) enqueue(ctx context.Context, o *enqueueOp, params []*store.JobInsertParams, now time.Time) error {
	b := m.b
	if len(params) >= SeparateEnqueueJobs {
		return b.doOn(ctx, b.writing.enqueuer, o)
	}
	b.offer(o, params, now)
	return b.doOp(ctx, o)
}

// sweep drops the leases the leader ended (dropLostLeasesLocked); only the leader sweeps the
// database.
func (m *clustered) sweep(now time.Time) bool {
	m.b.mu.Lock()
	m.b.dropLostLeasesLocked(now)
	m.b.mu.Unlock()
	return m.leader()
}

func (m *clustered) releaseUnstarted(ctx context.Context) error { return m.b.releaseOwnLeases(ctx) }

func (m *clustered) brokers(ctx context.Context) ([]store.BrokerRecord, string, error) {
	l, ok := m.cluster.(brokerLister)
	if !ok {
		return m.alone.brokers(ctx) // it cannot list its members: it lists itself
	}
	list, err := l.Brokers(ctx)
	if err != nil {
		return nil, "", err
	}
	return list, m.cluster.BrokerID(), nil
}

func (m *clustered) storedLeases(ctx context.Context, refs func() []job.LeaseRef) (map[job.LeaseRef]*job.Job, error) {
	return m.b.leasesInStore(ctx, refs())
}

// clusterLink is the broker's part in its cluster: it publishes its count of worker streams
// with its heartbeat, listens to the cluster's events and campaigns for its leadership, until
// it stops, which gives the leadership up. It stops after the writer and before the store
// closes.
type clusterLink struct {
	service.Base
	m *clustered
}

func (s *clusterLink) Start(ctx context.Context) error {
	if err := s.Base.Start(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	s.OnStop(cancel)
	m := s.m
	m.publishWorkers()
	s.Go(func() { m.cluster.Listen(ctx, m.onEvent) })
	s.Go(func() { m.cluster.Campaign(ctx, m.onLeadership) })
	return nil
}

// isLeader reports whether this broker runs the maintenance that must run once: always when it
// is alone, else while it holds the cluster's leadership.
func (b *Broker) isLeader() bool { return b.mode.leader() }

// Leader reports whether this broker runs the maintenance that must run once: always when it
// is alone, else while it leads its cluster.
func (b *Broker) Leader() bool { return b.isLeader() }

// onEvent handles one event from the cluster. It runs on the listening goroutine and must not
// block.
func (m *clustered) onEvent(e store.Event) {
	b, own := m.b, e.From == m.cluster.BrokerID()
	switch e.Kind {
	case store.EventReady:
		if !own { // this broker's own writes signalled already
			b.signal()
		}
	case store.EventBreaker:
		if !own { // this broker's own writes cached their states
			b.breakersStale()
		}
	case store.EventScheduled:
		if n, err := strconv.ParseInt(e.Key, 10, 64); err == nil && !own {
			b.schedule(time.Unix(0, n)) // only the leader arms a timer
		}
	case store.EventCancel:
		if ref, ok := parseCancelKey(e.Key); ok && !own {
			b.cancelHeld(ref) // whichever broker's worker holds it
		}
	case store.EventQueues:
		// This broker's own changes too: a read of the rules that began before such a change
		// committed may have put an older rule back.
		b.queuesChanged()
	case store.EventResync:
		b.breakersStale()
		b.queuesChanged()
		b.signal()
	}
	if w := m.watchers.Load(); w != nil {
		for _, fn := range *w {
			fn(e)
		}
	}
}

// WatchCluster has fn hear every event of the broker's cluster after the broker has handled
// it, those it publishes itself and EventResync included; alone, the broker has none. fn runs
// on the listening goroutine and must not block. The API tokens' keeper watches for
// revocations this way.
func (b *Broker) WatchCluster(fn func(store.Event)) { b.mode.watch(fn) }

func (m *clustered) watch(fn func(store.Event)) {
	for {
		old := m.watchers.Load()
		var fns []func(store.Event)
		if old != nil {
			fns = append(fns, *old...)
		}
		fns = append(fns, fn)
		if m.watchers.CompareAndSwap(old, &fns) {
			return
		}
	}
}

// scheduledEvent tells the leader a job was stored SCHEDULED until at.
func scheduledEvent(at time.Time) store.Event {
	return store.Event{Kind: store.EventScheduled, Key: strconv.FormatInt(at.UnixNano(), 10)}
}

// cancelEvent tells the brokers that the job held under ref was cancelled.
func cancelEvent(ref job.LeaseRef) store.Event {
	return store.Event{Kind: store.EventCancel, Key: strconv.FormatInt(ref.JobID, 10) + ":" + ref.Token.String()}
}

func parseCancelKey(key string) (job.LeaseRef, bool) {
	id, token, ok := strings.Cut(key, ":")
	if !ok {
		return job.LeaseRef{}, false
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return job.LeaseRef{}, false
	}
	t, err := job.ParseLeaseToken(token)
	if err != nil {
		return job.LeaseRef{}, false
	}
	return job.LeaseRef{JobID: n, Token: t}, true
}

// onLeadership is called by the campaign when this broker becomes or stops being the leader.
func (m *clustered) onLeadership(leader bool) {
	m.isLead.Store(leader)
	promoter := m.b.svc.promoter
	if !leader {
		promoter.disarm()
		return
	}
	// Nothing the last leader left undone waits for a timer.
	go func() {
		promoter.promoteNow()
		m.b.Sweep()
	}()
}

// pollTick asks for a dispatch round and, on the leader, promotes scheduled jobs (which also
// arms the timer for the next one, stored through any broker), and looks whether workers need
// evening out (rebalance).
func (m *clustered) pollTick() {
	m.b.signal()
	if m.leader() {
		m.b.svc.promoter.promoteNow()
		m.b.svc.schedules.runNow() // schedules another broker added or resumed
	}
	m.rebalance()
}

// dropLostLeasesLocked forgets, in a cluster, the leases whose deadline passed more than a sweep
// interval ago: the leader's sweep has ended them in the database by now (their token is
// refused there), so their workers are told to stop and their capacity is freed. Alone, the
// broker's own sweep ends them as it stores the expiry.
func (b *Broker) dropLostLeasesLocked(now time.Time) {
	grace := b.cfg.SweepInterval
	for _, l := range b.table.leases {
		if l.finishing() {
			continue
		}
		reason, kind := CancelLeaseLost, breaker.LeaseExpired
		switch {
		case l.started && now.After(l.startedAt.Add(l.job.AttemptTimeout).Add(grace)):
			reason, kind = CancelTimeout, breaker.Timeout
		case now.After(l.deadline.Add(grace)):
		default:
			continue
		}
		sess := l.sess
		if l.started {
			b.endLeaseLocked(l, permitFailed, kind)
		} else {
			b.endLeaseLocked(l, permitReleased, 0)
		}
		if sess != nil {
			sess.out.push(Cancel{Ref: l.ref, Reason: reason})
		}
	}
}

// releaseOwnLeases hands back, at shutdown in a cluster, the leases this broker handed out
// whose user code provably never started, each fenced by its token: those whose Assignment
// never left (withdrawn from the outbox now, so it never will). A job whose Assignment was sent
// may be running though its Started has not arrived: it stays LEASED, for its worker to adopt
// on another broker, or to expire (Session.Close). Other brokers' leases are theirs. The probe
// slots the released jobs hold are released in the same write.
func (b *Broker) releaseOwnLeases(ctx context.Context) error {
	b.mu.Lock()
	unsent := make(map[job.LeaseRef]bool)
	for _, s := range b.table.sessions {
		for _, ref := range s.out.withdraw() {
			unsent[ref] = true
		}
	}
	var held []heldProbe
	for _, l := range b.table.leases {
		if !l.started && !l.finishing() && unsent[l.ref] {
			held = append(held, heldProbe{ref: l.ref, typ: l.job.Type, permit: l.permit})
		}
	}
	b.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	var ch breakerChanges
	// Through the writer, which is still running: it alone changes shared breakers.
	err := b.do(ctx, "shutdown_release", func(tx store.Tx) error {
		_, err := b.releaseHeld(tx, &ch, held)
		return err
	})
	if err == nil {
		b.applyBreakerChanges(ch)
	}
	return err
}

// leasesInStore reads, in a cluster, the jobs whose lease is (or was last) each of refs: a job
// leased again since, or gone, is left out. One transaction reads them all.
func (b *Broker) leasesInStore(ctx context.Context, refs []job.LeaseRef) (map[job.LeaseRef]*job.Job, error) {
	out := make(map[job.LeaseRef]*job.Job)
	if len(refs) == 0 {
		return out, nil
	}
	err := b.do(ctx, "adopt", func(tx store.Tx) error {
		clear(out)
		ids := make([]int64, len(refs))
		for i, r := range refs {
			ids[i] = r.JobID
		}
		jobs, err := tx.JobGetMany(ids)
		if err != nil {
			return err
		}
		byID := make(map[int64]*job.Job, len(jobs))
		for _, j := range jobs {
			byID[j.ID] = j
		}
		for _, r := range refs {
			if j := byID[r.JobID]; j != nil && j.LeaseToken == r.Token {
				out[r] = j
			}
		}
		return nil
	})
	return out, err
}

// resultStored reports whether j, read under the token of a lease granted to workerID, shows
// that lease's result stored: it moved on from LEASED or RUNNING under that token without
// being released (a release, or the expiry of a lease never started, clears the worker),
// cancelled, or failed by the broker itself (an expired lease or attempt timeout, which the
// sweep records as the job's last error).
func resultStored(j *job.Job, workerID string) bool {
	switch {
	case j == nil || j.State.Held() || j.WorkerID == "" || j.WorkerID != workerID:
		return false
	case j.State == job.StateSucceeded:
		return true
	case j.State == job.StateCancelled:
		return false
	default:
		return j.LastErrorType != leaseExpiredErrorType && j.LastErrorType != timeoutErrorType
	}
}

// storedResult answers, in a cluster, a result for a lease this broker does not hold
// whose result is stored already (sent first through another broker, or before a restart):
// the same outcome gets the decision the database shows, another outcome is refused. It
// reports whether it answered.
func (s *Session) storedResult(ctx context.Context, ref job.LeaseRef, success bool) bool {
	return s.b.mode.storedResult(ctx, s, ref, success)
}

func (m *clustered) storedResult(ctx context.Context, s *Session, ref job.LeaseRef, success bool) bool {
	b := m.b
	jobs, err := b.st.JobGetMany(ctx, []int64{ref.JobID})
	if err != nil || len(jobs) == 0 || jobs[0].LeaseToken != ref.Token || !resultStored(jobs[0], s.workerID) {
		return false
	}
	j := jobs[0]
	var d triage.Decision
	switch {
	case j.State == job.StateSucceeded && success:
		d = triage.Success()
	case j.State == job.StateDead && !success:
		d = triage.Decision{Verdict: triage.Dead, Reason: j.DeadReason}
	case (j.State == job.StatePending || j.State == job.StateScheduled) && !success:
		d = triage.Decision{Verdict: triage.Retry, RetryAt: j.RunAt}
	default:
		s.refuse(ref, AboutResult, RefusedStale, "a different result for this lease is already stored")
		return true
	}
	s.out.push(ResultAck{Ref: ref, Decision: d})
	return true
}
