package broker

import (
	"context"
	"time"

	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// mode is what differs between a broker alone on its database (local) and one of several
// brokers serving it (clustered, cluster.go). New picks one, from Options.Cluster, and the
// rest of the broker asks the mode rather than which mode it is in.
type mode interface {
	// id is this broker's id among the brokers serving its database; "" alone.
	id() string
	// leader reports whether this broker runs the maintenance that must run once.
	leader() bool
	// breakers is where the breakers' states live.
	breakers() breakerHome
	// services are the mode's own background concerns: timed ones stop as a shutdown begins,
	// the others once the writer stopped (see services).
	timed() []service.Service
	after() []service.Service
	// recover reads, in tx at start, what an earlier run of this broker left.
	recover(tx store.Tx) (recovered, error)
	// concurrentWriters reports whether other transactions write the database's jobs while
	// this broker's writer does (other brokers' writers): then large enqueues may go to a writer
	// of their own (enqueuer.go), and each batch locks the jobs it writes first
	// (commit.Config.LockJobs). Alone, the writer is the only one, and needs neither.
	concurrentWriters() bool
	// enqueue writes o, an enqueue of the jobs params at now.
	enqueue(ctx context.Context, o *enqueueOp, params []*store.JobInsertParams, now time.Time) error
	// sweep is told a sweep begins at now, and reports whether this broker ends the expired
	// leases in the database.
	sweep(now time.Time) bool
	// releaseUnstarted hands back, at shutdown, the jobs leased and never started.
	releaseUnstarted(ctx context.Context) error
	// brokers lists the brokers serving the database, and which one this broker is.
	brokers(ctx context.Context) ([]store.BrokerRecord, string, error)
	// storedLeases reads the leases a reconnecting worker says it holds (refs) that this
	// broker does not know: a job leased again since, or gone, is left out.
	storedLeases(ctx context.Context, refs func() []job.LeaseRef) (map[job.LeaseRef]*job.Job, error)
	// storedResult answers a result for a lease this broker does not hold whose result is
	// stored already, and reports whether it answered.
	storedResult(ctx context.Context, s *Session, ref job.LeaseRef, success bool) bool
	// sharedQueues reports whether the queues' pauses and caps are decided in the database,
	// over every broker's leases: then a lease enforces them, its hand-out does not count them
	// again, and a lease ended in a capped queue tells the other brokers of the room.
	sharedQueues() bool
	// watch has fn hear every event of the cluster (WatchCluster).
	watch(fn func(store.Event))
	// returned notes, with the broker's lock held, a worker's new stream (rebalance.go).
	returned(workerID string, now time.Time)
	// forgetsClosed reports whether a closed stream's running leases are forgotten, their
	// worker free to come back on any broker, rather than kept for its return here.
	forgetsClosed() bool
}

// recovered is what a broker's start finds left by its earlier run.
type recovered struct {
	released int        // leased jobs handed back
	running  []*job.Job // jobs RUNNING under leases held by no session yet
	next     time.Time  // the earliest SCHEDULED job's due time, if hasNext
	hasNext  bool
}

// local is the mode of a broker alone on its database: everything it decides lives in its
// memory, every lease in the database is its own, and it leads.
type local struct {
	b    *Broker
	self store.BrokerRecord // this broker as Brokers lists it
}

func (m *local) breakers() breakerHome    { return breakersInMemory{m.b} }
func (*local) id() string                 { return "" }
func (*local) leader() bool               { return true }
func (*local) timed() []service.Service   { return nil }
func (*local) after() []service.Service   { return nil }
func (*local) concurrentWriters() bool    { return false }
func (*local) sweep(time.Time) bool       { return true }
func (*local) sharedQueues() bool         { return false }
func (*local) forgetsClosed() bool        { return false }
func (*local) returned(string, time.Time) {}

// watch does nothing: alone, the broker has no cluster events.
func (*local) watch(func(store.Event)) {}

func (m *local) recover(tx store.Tx) (recovered, error) {
	var r recovered
	var err error
	// No worker can hold a lease that never reached user code across a broker restart:
	// those jobs go straight back to PENDING, with no attempt spent.
	if r.released, err = tx.JobReleaseAllLeased(); err != nil {
		return r, err
	}
	if r.running, err = tx.JobListRunning(); err != nil {
		return r, err
	}
	r.next, r.hasNext, err = tx.JobNextScheduledAt()
	return r, err
}

// enqueue offers o's jobs to workers with room (offer.go) unless jobs may be waiting
// (readyMaybe): the store would lease no offered job ahead of them, and the round that the
// enqueue's commit then carries could not use the slots the offers held. A cluster's broker
// offers either way, as it did before the rule: its measurements on PostgreSQL could not tell
// the rule's cost from the machine's stalls (docs/performance-log.md).
func (m *local) enqueue(ctx context.Context, o *enqueueOp, params []*store.JobInsertParams, now time.Time) error {
	if !m.b.writing.readyMaybe.Load() {
		m.b.offer(o, params, now)
	}
	return m.b.doOp(ctx, o)
}

// releaseUnstarted hands back every LEASED job, as a start would do anyway (Start), and so do
// their leases in memory, which a closed stream may have kept (Session.Close).
func (m *local) releaseUnstarted(ctx context.Context) error {
	b := m.b
	err := b.st.Write(ctx, "shutdown_release", func(tx store.Tx) error {
		_, err := tx.JobReleaseAllLeased()
		return err
	})
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.table.leases {
		if !l.started && !l.finishing() {
			b.endLeaseLocked(l, permitReleased, 0)
		}
	}
	return nil
}

func (m *local) brokers(context.Context) ([]store.BrokerRecord, string, error) {
	r := m.self
	r.LastSeen = m.b.clk.Now()
	m.b.mu.Lock()
	r.Workers = len(m.b.table.sessions)
	m.b.mu.Unlock()
	return []store.BrokerRecord{r}, r.ID, nil
}

func (*local) storedLeases(context.Context, func() []job.LeaseRef) (map[job.LeaseRef]*job.Job, error) {
	return nil, nil
}

func (*local) storedResult(context.Context, *Session, job.LeaseRef, bool) bool { return false }
