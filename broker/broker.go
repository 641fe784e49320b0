// Package broker is the heart of Jobwire: it owns every decision about a job after it is
// stored. It leases ready jobs to connected workers (dispatch.go), applies their reports
// (session.go), expires leases and attempt timeouts (sweep.go) and wakes scheduled jobs.
//
// All writes go through one writer goroutine that batches whatever operations are waiting
// into one transaction (group commit), and every reply that depends on a write is sent only
// after that write committed.
package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/reach"
	"github.com/jobwire/jobwire/triage"
)

// ErrShuttingDown is returned for work offered after Shutdown began.
var ErrShuttingDown = errors.New("broker is shutting down")

// Options are the broker's collaborators. Only Store is required.
type Options struct {
	Store  store.Store
	Config Config
	Clock  clock.Clock
	// Rand draws the retry jitter. Seed it in tests for repeatable waits.
	Rand *rand.Rand
	// Random supplies the secret part of every lease token. Nil: crypto/rand.Reader, which is
	// what makes tokens unguessable; tests may pass a seeded source for repeatable tokens.
	Random io.Reader
	Logger *slog.Logger
	// Breakers configures the circuit breakers that hold dispatch back for job types that
	// fail as a group. Nil: breakers with their defaults.
	Breakers *BreakerOptions
	// Observer hears of enqueues, attempts, cancels, breaker transitions and commits, for
	// metrics. Nil: nobody listens.
	Observer Observer
	// Tracer records spans for enqueues and deliveries, in the producer's trace. Nil: none.
	Tracer trace.Tracer
	// Cluster links this broker to the other brokers serving its database (see cluster.go).
	// Nil: the broker is alone (SQLite), and everything it decides lives in its memory.
	Cluster store.Cluster
	// ClusterPoll is how often a broker in a cluster looks for ready jobs with no event telling
	// it to (a lost notification delays a job at most this much). Zero: DefaultClusterPoll.
	ClusterPoll time.Duration
	// Addr is the address the broker listens on, which Brokers reports when it is alone (a
	// cluster's store records its own). Empty: not known.
	Addr string
	// Commit chooses the writer: GroupCommit (the zero value) or OneByOne, its reference.
	Commit Commit
	// DatabaseSilence is how long the database may leave the broker waiting, answering
	// nothing, before the broker stops taking calls until it answers again (see reach.go);
	// the jobwire command uses DefaultDatabaseSilence. Zero: the broker waits as long as its
	// callers do.
	DatabaseSilence time.Duration
}

// BreakerOptions configure the per-type circuit breakers.
type BreakerOptions struct {
	Default breaker.Config
	PerType map[string]breaker.Config
}

// Broker dispatches jobs to workers and applies their results.
type Broker struct {
	cfg     Config
	st      store.Store
	random  io.Reader
	clk     clock.Clock
	log     *slog.Logger
	triager *triage.Triager
	obs     Observer
	tracer  trace.Tracer

	breakers *breaker.Set
	// reach follows whether the database answers (reach.go); nil when waits are not bounded.
	reach *reach.Tracker
	// cluster is nil when the broker is alone; see cluster.go.
	cluster     store.Cluster
	self        store.BrokerRecord // this broker as Brokers lists it when alone
	clusterPoll time.Duration
	leader      atomic.Bool // this broker leads the cluster (isLeader)
	clusterDone sync.WaitGroup
	pollTimer   clock.Timer
	// watchers hear the cluster's events (WatchCluster).
	watchers atomic.Pointer[[]func(store.Event)]

	ctx    context.Context // ends when the broker stops; for work no caller waits on
	cancel context.CancelFunc

	// writer commits the broker's operations and runs dispatch (writer.go); enqueuer commits
	// large enqueues, in a cluster only (enqueuer.go).
	writer, enqueuer commit.Writer
	// readyMaybe is false only when the last dispatch round leased every ready job it could
	// see and nothing has made more ready since (see signal).
	readyMaybe atomic.Bool
	stop       chan struct{}
	stopped    sync.WaitGroup

	mu           sync.Mutex
	sessions     []*Session // in dispatch rotation order
	leases       map[int64]*lease
	shuttingDown bool
	schedTimer   clock.Timer
	schedAt      time.Time
	schedGen     uint64 // counts armed scheduler timers; see promote
	sweepTimer   clock.Timer
	breakerTimer clock.Timer
	breakerAt    time.Time

	retentionTimer clock.Timer
	// queueRules holds every paused or capped queue; see queues.go. pausedQueues counts the
	// paused ones and cappedQueues names the capped ones.
	queueRules   map[string]queueRule
	pausedQueues int
	cappedQueues map[string]bool
	queueReload  queueReload
	// racedCancels are jobs cancelled while LEASED with no lease in memory yet: a dispatch
	// round stored the lease and has not handed it out. That round drops them.
	racedCancels map[int64]racedCancel
	recent       recentResults // answers to stored results, for repeats
	moves        moves         // moves of workers to other brokers (rebalance.go)

	breakerMu      sync.Mutex
	breakerPending map[string]breaker.Saved // latest state per type, not yet stored
	breakerDirty   chan struct{}
	breakerStale   chan struct{} // shared breakers changed elsewhere: refresh the cache
	breakerBatch   breakerBatch  // shared breaker changes of the batch being written
	// lockingBreaker, set by tests only, is told before (locked false) and after each breaker
	// row lock the writer takes, on the writer goroutine.
	lockingBreaker func(typ string, locked bool)
	breakerFailed  map[string]bool // types with a failure since their breaker was last saved
	breakerSave    clock.Timer     // saves breakerFailed's breakers; nil when none waits
	breakerStopped bool            // no more saves are scheduled once shutdown begins
	// breakerHolder names this broker when its breakers are shared through the database with
	// other brokers (see sharedbreakers.go); "" when they live in its memory.
	breakerHolder string
	nextSession   int64
}

// New builds a broker. Call Start before use.
func New(opts Options) (*Broker, error) {
	if opts.Store == nil {
		return nil, errors.New("broker: a store is required")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	if opts.ClusterPoll <= 0 {
		opts.ClusterPoll = DefaultClusterPoll
	}
	var randMu sync.Mutex
	r := opts.Rand
	fatal := make(map[string]bool, len(opts.Config.AlwaysFatal))
	for _, t := range opts.Config.AlwaysFatal {
		fatal[t] = true
	}
	b := &Broker{
		cfg:    opts.Config,
		st:     opts.Store,
		random: opts.Random,
		clk:    opts.Clock,
		log:    opts.Logger,
		obs:    opts.Observer,
		tracer: opts.Tracer,

		cluster:     opts.Cluster,
		clusterPoll: opts.ClusterPoll,
		self:        loneRecord(opts.Addr, opts.Clock.Now()),
		triager: &triage.Triager{
			Policy:      opts.Config.policy,
			AlwaysFatal: fatal,
			Uniform: func() float64 {
				randMu.Lock()
				defer randMu.Unlock()
				return r.Float64()
			},
		},
		stop:           make(chan struct{}),
		leases:         make(map[int64]*lease),
		queueRules:     make(map[string]queueRule),
		cappedQueues:   make(map[string]bool),
		racedCancels:   make(map[int64]racedCancel),
		breakerPending: make(map[string]breaker.Saved),
		breakerFailed:  make(map[string]bool),
		breakerDirty:   make(chan struct{}, 1),
		breakerStale:   make(chan struct{}, 1),
	}
	bo := opts.Breakers
	if bo == nil {
		bo = &BreakerOptions{Default: breaker.DefaultConfig()}
	}
	set, err := breaker.NewSet(opts.Clock, bo.Default, bo.PerType, b.onBreakerTransition)
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	b.breakers = set
	if opts.Cluster != nil {
		b.shareBreakers(opts.Cluster.BrokerID())
	}
	b.watchReach(opts.DatabaseSilence, opts.Cluster)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.newWriters(opts.Commit)
	b.readyMaybe.Store(true)
	return b, nil
}

// Start recovers state left by an earlier run and starts the writer (which also dispatches) and
// the sweeper.
func (b *Broker) Start(ctx context.Context) error {
	var released int
	var running []*job.Job
	var next time.Time
	var hasNext bool
	err := b.st.Write(ctx, "recover", func(tx store.Tx) error {
		if b.cluster != nil {
			// The leases in the database are other brokers' too, and this broker held none
			// before it started: a killed broker's leases expire through the leader's sweep.
			return nil
		}
		var err error
		// No worker can hold a lease that never reached user code across a broker restart:
		// those jobs go straight back to PENDING, with no attempt spent.
		if released, err = tx.JobReleaseAllLeased(); err != nil {
			return err
		}
		if running, err = tx.JobListRunning(); err != nil {
			return err
		}
		next, hasNext, err = tx.JobNextScheduledAt()
		return err
	})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if released > 0 {
		b.log.Info("returned leased jobs to pending after restart", "jobs", released)
	}
	if err := b.restoreBreakers(ctx); err != nil {
		return err
	}
	if err := b.loadQueueRules(ctx); err != nil {
		return err
	}
	// A RUNNING job is still running somewhere, as far as anyone knows: it keeps its lease,
	// held by no session, as when its worker's stream breaks. It counts under its queue's cap
	// until its worker comes back and adopts it (Open) or the sweep ends its lease.
	b.mu.Lock()
	for _, j := range running {
		b.leases[j.ID] = heldLease(nil, job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}, j)
	}
	b.mu.Unlock()
	b.runWriters()
	b.stopped.Add(1)
	go b.persistBreakersLoop()
	b.mu.Lock()
	if hasNext {
		b.scheduleLocked(next)
	}
	b.sweepTimer = b.clk.AfterFunc(b.cfg.SweepInterval, b.sweepTick)
	b.retentionTimer = b.clk.AfterFunc(b.cfg.Retention.Interval, b.retentionTick)
	b.mu.Unlock()
	b.startCluster()
	b.signal()
	return nil
}

// Shutdown stops dispatching, asks every worker to drain and waits (until ctx ends) for them
// to finish what they hold, then hands never-started jobs back and stops.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.shuttingDown {
		b.mu.Unlock()
		return nil
	}
	b.shuttingDown = true
	for _, s := range b.sessions {
		s.out.push(Drain{Reason: "broker shutting down"})
	}
	if b.schedTimer != nil {
		b.schedTimer.Stop()
	}
	if b.sweepTimer != nil {
		b.sweepTimer.Stop()
	}
	if b.breakerTimer != nil {
		b.breakerTimer.Stop()
	}
	if b.retentionTimer != nil {
		b.retentionTimer.Stop()
	}
	if b.pollTimer != nil {
		b.pollTimer.Stop()
	}
	b.mu.Unlock()
	b.breakerMu.Lock()
	b.breakerStopped = true
	if b.breakerSave != nil {
		b.breakerSave.Stop() // the final snapshot at shutdown stores every breaker
	}
	b.breakerMu.Unlock()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b.mu.Lock()
		held := 0
		for _, l := range b.leases {
			if l.sess != nil {
				held++
			}
		}
		b.mu.Unlock()
		if held == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	// Jobs that never started go back now; running ones keep their leases in storage and are
	// either finished by a worker that reconnects to the next broker or expire.
	var err error
	if b.cluster != nil {
		err = b.releaseOwnLeases(context.WithoutCancel(ctx))
	} else {
		// Alone, every LEASED job goes back, as a start would do anyway (Start); so do their
		// leases in memory, which a closed stream may have kept (Session.Close).
		err = b.st.Write(context.WithoutCancel(ctx), "shutdown_release", func(tx store.Tx) error {
			_, err := tx.JobReleaseAllLeased()
			return err
		})
		if err == nil {
			b.mu.Lock()
			for _, l := range b.leases {
				if !l.started && !l.finishing() {
					b.endLeaseLocked(l, permitReleased, 0)
				}
			}
			b.mu.Unlock()
		}
	}
	close(b.stop)
	b.stopped.Wait()
	b.cancel()
	b.clusterDone.Wait() // the leadership is given up before the store closes
	b.mu.Lock()
	for _, s := range b.sessions {
		s.out.close()
	}
	b.mu.Unlock()
	return err
}

// now is the broker's current time.
func (b *Broker) now() time.Time { return b.clk.Now() }

// signal says jobs may have become ready (or leasable again) and asks the writer for a
// dispatch round.
func (b *Broker) signal() {
	b.readyMaybe.Store(true)
	b.wakeWriter()
}

// signalCapacity says only that a worker has room again. A round is worth running only if jobs
// may be waiting (readyMaybe): the last round left some, or something made more ready since.
// Without this every result would cost a lease query that finds nothing.
func (b *Broker) signalCapacity() { b.wakeWriter() }

func (b *Broker) wakeWriter() { b.writer.Wake() }

// Enqueue stores jobs in one transaction and returns what became of each, in order. Zero
// fields of a spec take their defaults (see JobSpec).
func (b *Broker) Enqueue(ctx context.Context, specs []JobSpec) ([]Enqueued, error) {
	now := b.now()
	params := make([]*store.JobInsertParams, len(specs))
	for i := range specs {
		s := specs[i].withDefaults(b.cfg, now)
		params[i] = s.insertParams(now)
	}
	o := newEnqueueOp(params, now)
	spans := b.startEnqueueSpans(ctx, params)
	var err error
	switch {
	case b.cluster != nil && len(params) >= SeparateEnqueueJobs:
		err = b.doOn(ctx, b.enqueuer, o)
	case b.cluster != nil && o.grouped:
		// Jobs all offered need no round, and the other brokers no word of them: were one not
		// leased after all, settleOffers asks for the round.
		var all bool
		o.offers, all = b.planOffers(params, now)
		o.readies = o.readies && !all
		err = b.doOp(ctx, o)
	default:
		err = b.doOp(ctx, o)
	}
	results := o.results
	endEnqueueSpans(spans, results, err)
	if err != nil {
		return nil, err
	}
	out := make([]Enqueued, len(results))
	var earliest time.Time
	for i, r := range results {
		out[i] = Enqueued{ID: r.ID, Duplicate: r.Duplicate, State: r.State, RunAt: r.RunAt}
		if !r.Duplicate {
			b.obs.JobEnqueued(params[i].Queue, params[i].Type)
		}
		if r.State == job.StateScheduled && (earliest.IsZero() || r.RunAt.Before(earliest)) {
			earliest = r.RunAt
		}
	}
	if !earliest.IsZero() {
		b.mu.Lock()
		b.scheduleLocked(earliest)
		b.mu.Unlock()
	}
	return out, nil
}

// Get reads a job with its attempt history.
func (b *Broker) Get(ctx context.Context, id int64) (*job.Job, error) {
	return b.st.JobGet(ctx, id)
}

// ErrFinished is wrapped by Cancel's error for a job that had already finished (SUCCEEDED,
// DEAD or CANCELLED): nothing was changed.
var ErrFinished = errors.New("job already finished")

// finishedError says which state a job finished in; it is ErrFinished for errors.Is.
type finishedError struct {
	id    int64
	state job.State
}

func (e *finishedError) Error() string {
	return fmt.Sprintf("job %d already %s; nothing to cancel", e.id, e.state)
}

func (e *finishedError) Is(target error) bool { return target == ErrFinished }

// Cancel cancels a job that has not finished. A worker running it is told to stop. It
// returns the job as it is after the call. A job that had already finished is left as it is
// and reported with an error wrapping ErrFinished, so a caller can tell "cancelled now" from
// "ran to the end before the cancel" (a repeat of a cancel sees the job CANCELLED).
func (b *Broker) Cancel(ctx context.Context, id int64) (*job.Job, error) {
	var before *job.Job
	var ch breakerChanges
	err := b.do(ctx, "cancel", func(tx store.Tx) error {
		ch.reset()
		var err error
		before, err = tx.JobCancel(id, b.now())
		if err != nil || before.State.Final() {
			return err
		}
		if err := b.audit(ctx, tx, &store.AuditEvent{Action: AuditJobCancel, Target: strconv.FormatInt(id, 10),
			Detail: "was " + before.State.String(), Count: 1, JobIDs: []int64{id}}); err != nil {
			return err
		}
		if !before.State.Held() {
			return nil
		}
		ref := job.LeaseRef{JobID: id, Token: before.LeaseToken}
		tx.Publish(cancelEvent(ref)) // the broker whose worker holds it stops that worker
		return b.settleShared(tx, &ch, before.Type, id, 0, b.keptPermit(ref), permitReleased, 0, "")
	})
	if err != nil {
		return nil, err
	}
	b.applyBreakerChanges(ch)
	if before.State.Final() {
		return nil, &finishedError{id: id, state: before.State}
	}
	b.obs.JobCancelled(before.Queue, before.Type)
	if before.State.Held() {
		b.cancelHeld(job.LeaseRef{JobID: id, Token: before.LeaseToken})
	}
	return b.st.JobGet(ctx, id)
}

// cancelHeld ends the lease of a job just cancelled and tells its worker to stop.
func (b *Broker) cancelHeld(ref job.LeaseRef) {
	b.mu.Lock()
	if l := b.leaseLocked(ref); l != nil {
		b.endLeaseLocked(l, permitReleased, 0)
		if l.sess != nil {
			l.sess.out.push(Cancel{Ref: l.ref, Reason: CancelRequested})
		}
	} else {
		// The lease may be stored but not handed out yet: make sure it never is.
		b.racedCancels[ref.JobID] = racedCancel{token: ref.Token, at: b.now()}
	}
	b.mu.Unlock()
	b.signalCapacity()
}

// scheduleLocked makes sure the scheduler wakes by at: then SCHEDULED jobs due become PENDING.
func (b *Broker) scheduleLocked(at time.Time) {
	if b.shuttingDown || !b.isLeader() {
		return // in a cluster the leader promotes, whoever stored the job (pollTick)
	}
	if b.schedTimer != nil && !at.Before(b.schedAt) {
		return
	}
	if b.schedTimer != nil {
		b.schedTimer.Stop()
	}
	b.schedAt = at
	b.schedGen++
	gen := b.schedGen
	b.schedTimer = b.clk.AfterFunc(at.Sub(b.now()), func() { b.promote(gen) })
}

// promote moves due SCHEDULED jobs to PENDING and sets the timer for the next one. gen names
// the timer that fired.
func (b *Broker) promote(gen uint64) {
	// The timer is spent from the moment it fires, not once this promote is done: a job that
	// becomes SCHEDULED while the promote below runs may commit after the promote read the next
	// due time, and the scheduleLocked it calls must then arm a timer of its own rather than
	// count on this one. A newer timer armed meanwhile is left alone.
	b.mu.Lock()
	if b.schedGen == gen {
		b.schedTimer = nil
	}
	b.mu.Unlock()
	if !b.isLeader() {
		return
	}
	var n int
	var next time.Time
	var hasNext bool
	err := b.do(b.ctx, "promote", func(tx store.Tx) error {
		var err error
		if n, err = tx.JobPromoteScheduled(b.now()); err != nil {
			return err
		}
		if n > 0 {
			tx.Publish(readyEvent)
		}
		next, hasNext, err = tx.JobNextScheduledAt()
		return err
	})
	b.mu.Lock()
	switch {
	case errors.Is(err, ErrShuttingDown):
		// A promote the leadership or the cluster poll started as the broker stopped.
	case err != nil:
		b.log.Error("promote scheduled jobs", "err", err)
		b.scheduleLocked(b.now().Add(time.Second))
	case hasNext:
		b.scheduleLocked(next)
	}
	b.mu.Unlock()
	// n is only read once the write reported back: after an error (a stop, say) the write may
	// still be running and setting it.
	if err == nil && n > 0 {
		b.signal()
	}
}
