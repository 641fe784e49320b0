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
	"github.com/jobwire/jobwire/internal/service"
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
//
// Its state is in parts, each with its owner: what it was built with (env), the writers' side
// (writing), what differs between a broker alone and one of a cluster (mode), the background
// services (svc), and, under mu, the table of sessions and leases dispatch works on with the
// queue rules it respects. The parts are named fields, not embedded ones, so that every access
// says whose state it touches; TestBrokerStaysSmall keeps the count of fields under
// maxBrokerFields.
type Broker struct {
	env
	// writing is the writers' side and what the batch being written keeps (writer.go).
	writing writerState
	// mode is what differs between a broker alone and one of a cluster (mode.go, cluster.go).
	mode mode
	// svc are the broker's background concerns (services.go).
	svc *services

	ctx    context.Context // ends when the broker stops; for work no caller waits on
	cancel context.CancelFunc

	// mu guards table, queues and shuttingDown.
	mu           sync.Mutex
	table        leaseTable
	queues       queueState // every paused or capped queue (queues.go)
	shuttingDown bool
}

// leaseTable is who is connected and what each holds: the sessions dispatch hands jobs to, the
// leases they hold and what is remembered about leases just ended. The broker's mu guards it.
type leaseTable struct {
	sessions []*Session // in dispatch rotation order
	leases   map[int64]*lease
	// racedCancels are jobs cancelled while LEASED with no lease in memory yet: a dispatch
	// round stored the lease and has not handed it out. That round drops them.
	racedCancels map[int64]racedCancel
	recent       recentResults // answers to stored results, for repeats
	nextSession  int64
}

// env is what a broker is built with: set by New, never changed after.
type env struct {
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
}

// writerState is the writers' (writer.go, enqueuer.go) and what the batch being written keeps.
type writerState struct {
	// writer commits the broker's operations and runs dispatch (writer.go); enqueuer commits
	// large enqueues, in a cluster only (enqueuer.go).
	writer, enqueuer commit.Writer
	// readyMaybe is false only when the last dispatch round leased every ready job it could
	// see and nothing has made more ready since (see signal).
	readyMaybe atomic.Bool
	stop       chan struct{}
	stopped    sync.WaitGroup

	breakerBatch breakerBatch  // shared breaker changes of the batch being written
	seen         breakersSeen  // the stored breakers the writer wrote last
	successes    heldSuccesses // successes not yet in their stored breakers (successes.go)
	// progress is the progress reports waiting for the writer, coalesced (outcome.go).
	progress progressQueue
	// lockingBreaker, set by tests only, is told before (locked false) and after each breaker
	// row lock the writer takes, on the writer goroutine; of a breaker saved without its lock
	// (breakersSeen), whose row its save locks at commit, at once.
	lockingBreaker func(typ string, locked bool)
}

// New builds a broker. Call Start before use.
func New(opts Options) (*Broker, error) {
	if opts.Store == nil {
		return nil, errors.New("broker: a store is required")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	b := &Broker{
		env: env{
			cfg:     opts.Config,
			st:      opts.Store,
			random:  opts.Random,
			clk:     opts.Clock,
			log:     opts.Logger,
			obs:     opts.Observer,
			tracer:  opts.Tracer,
			triager: newTriager(opts.Config, opts.Rand),
		},
		writing: writerState{stop: make(chan struct{})},
		table:   leaseTable{leases: make(map[int64]*lease), racedCancels: make(map[int64]racedCancel)},
		queues:  queueState{queueRules: make(map[string]queueRule), cappedQueues: make(map[string]bool)},
	}
	set, err := b.newBreakers(opts.Breakers)
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	b.breakers = set
	self := loneRecord(opts.Addr, opts.Clock.Now())
	b.mode = &local{b: b, self: self}
	if opts.Cluster != nil {
		b.mode = newClustered(b, opts.Cluster, opts.ClusterPoll, self)
	}
	b.svc = newServices(b)
	b.svc.keys = newKeyLimits(b, opts.Cluster != nil, opts.ClusterPoll)
	b.watchReach(opts.DatabaseSilence, opts.Cluster)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.newWriters(opts.Commit)
	b.writing.readyMaybe.Store(true)
	b.watchDependents(opts.Store)
	return b, nil
}

// withDefaults is opts with every optional collaborator left nil given its default, so the
// broker never checks for one again.
func (opts Options) withDefaults() Options {
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
	return opts
}

// newTriager decides failures by cfg's retry policy. Its jitter draws from r under a lock of
// its own, because reports are triaged on many sessions' goroutines at once and a rand.Rand is
// not safe for concurrent use.
func newTriager(cfg Config, r *rand.Rand) *triage.Triager {
	var randMu sync.Mutex
	fatal := make(map[string]bool, len(cfg.AlwaysFatal))
	for _, t := range cfg.AlwaysFatal {
		fatal[t] = true
	}
	return &triage.Triager{
		Policy:      cfg.policy,
		AlwaysFatal: fatal,
		Uniform: func() float64 {
			randMu.Lock()
			defer randMu.Unlock()
			return r.Float64()
		},
	}
}

// newBreakers builds the per-type circuit breakers bo configures (nil: their defaults), whose
// transitions the broker hears of.
func (b *Broker) newBreakers(bo *BreakerOptions) (*breaker.Set, error) {
	if bo == nil {
		bo = &BreakerOptions{Default: breaker.DefaultConfig()}
	}
	return breaker.NewSet(b.clk, bo.Default, bo.PerType, b.onBreakerTransition)
}

// Start recovers state left by an earlier run and starts the writer (which also dispatches) and
// the background services.
func (b *Broker) Start(ctx context.Context) error {
	var rec recovered
	err := b.st.Write(ctx, "recover", func(tx store.Tx) error {
		var err error
		rec, err = b.mode.recover(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if rec.released > 0 {
		b.log.Info("returned leased jobs to pending after restart", "jobs", rec.released)
	}
	if err := b.loadRules(ctx); err != nil {
		return err
	}
	// A RUNNING job is still running somewhere, as far as anyone knows: it keeps its lease,
	// held by no session, as when its worker's stream breaks. It counts under its queue's cap
	// until its worker comes back and adopts it (Open) or the sweep ends its lease.
	b.mu.Lock()
	for _, j := range rec.running {
		b.table.leases[j.ID] = heldLease(nil, job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}, j)
	}
	b.mu.Unlock()
	// The services start before the writer, whose first round may arm a service's timer, and
	// the mode's last: a cluster's leadership, once won, promotes and sweeps through the writer.
	for _, s := range b.svc.after() {
		if err := s.Start(b.ctx); err != nil {
			return err
		}
	}
	for _, s := range b.timedServices() {
		if err := s.Start(b.ctx); err != nil {
			return err
		}
	}
	b.runWriters()
	for _, s := range b.mode.after() {
		if err := s.Start(b.ctx); err != nil {
			return err
		}
	}
	if rec.hasNext {
		b.schedule(rec.next)
	}
	if err := b.declareSchedules(ctx, b.cfg.Schedules); err != nil {
		return err
	}
	if err := b.armSchedules(ctx); err != nil {
		return err
	}
	b.signal()
	return nil
}

// loadRules reads what decides dispatch before the first round: the breakers' states, the
// queues' rules, and the concurrency rules and rate limits, the configuration's written first.
func (b *Broker) loadRules(ctx context.Context) error {
	for _, load := range []func(context.Context) error{b.restoreBreakers, b.loadQueueRules, b.applyConfiguredKeys, b.startRateLimits} {
		if err := load(ctx); err != nil {
			return err
		}
	}
	return nil
}

// timedServices are the services that start work on a clock: the broker's, then its mode's.
func (b *Broker) timedServices() []service.Service {
	return append(append(b.svc.timed(), b.mode.timed()...), b.svc.keys.services()...)
}

// afterServices are the services that stop once the writer stopped, in the order they stop:
// breaker persistence (its last states), then the mode's (a cluster's leadership is given up
// before the store closes).
func (b *Broker) afterServices() []service.Service {
	return append(b.svc.after(), b.mode.after()...)
}

// Shutdown stops dispatching, asks every worker to drain and waits (until ctx ends) for them
// to finish what they hold, then hands never-started jobs back and stops.
//
// The services stop in two steps. As the shutdown begins, the timed ones are told to start no
// more work. The writer stops after the drain; the services that outlive it (breaker
// persistence, the cluster's membership) stop then, in order; last, the shutdown waits for
// the work the timed services had under way, which ended with the writer.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.shuttingDown {
		b.mu.Unlock()
		return nil
	}
	b.shuttingDown = true
	for _, s := range b.table.sessions {
		s.out.push(Drain{Reason: "broker shutting down"})
	}
	b.mu.Unlock()
	timed := b.timedServices()
	service.StopAll(timed...)

	b.waitDrained(ctx)
	// Jobs that never started go back now; running ones keep their leases in storage and are
	// either finished by a worker that reconnects to the next broker or expire.
	err := b.mode.releaseUnstarted(context.WithoutCancel(ctx))
	b.storeHeldSuccesses(context.WithoutCancel(ctx))
	close(b.writing.stop)
	b.writing.stopped.Wait()
	for _, s := range b.afterServices() {
		s.Stop()
		<-s.Stopped()
	}
	b.cancel()
	service.WaitStopped(timed...)
	b.mu.Lock()
	for _, s := range b.table.sessions {
		s.out.close()
	}
	b.mu.Unlock()
	return err
}

// waitDrained waits until no session holds a lease, or ctx ends.
func (b *Broker) waitDrained(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b.mu.Lock()
		held := 0
		for _, l := range b.table.leases {
			if l.sess != nil {
				held++
			}
		}
		b.mu.Unlock()
		if held == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// now is the broker's current time.
func (b *Broker) now() time.Time { return b.clk.Now() }

// signal says jobs may have become ready (or leasable again) and asks the writer for a
// dispatch round.
func (b *Broker) signal() {
	b.writing.readyMaybe.Store(true)
	b.wakeWriter()
}

// signalCapacity says only that a worker has room again. A round is worth running only if jobs
// may be waiting (readyMaybe): the last round left some, or something made more ready since.
// Without this every result would cost a lease query that finds nothing.
func (b *Broker) signalCapacity() { b.wakeWriter() }

func (b *Broker) wakeWriter() { b.writing.writer.Wake() }

// Enqueue stores jobs in one transaction and returns what became of each, in order. Zero
// fields of a spec take their defaults (see JobSpec).
func (b *Broker) Enqueue(ctx context.Context, specs []JobSpec) ([]Enqueued, error) {
	if hasDeps(specs) {
		return b.enqueueWithDeps(ctx, specs)
	}
	if len(specs) > 0 && specs[0].Batch != 0 {
		out, _, err := b.EnqueueBatch(ctx, specs, nil)
		return out, err
	}
	now := b.now()
	params := make([]*store.JobInsertParams, len(specs))
	for i := range specs {
		s := specs[i].withDefaults(b.cfg, now)
		params[i] = s.insertParams(now)
		b.svc.rates.keyOf(params[i], s.RateKey)
	}
	if err := b.svc.keys.assign(specs, params); err != nil {
		return nil, err
	}
	o := newEnqueueOp(params, now)
	spans := b.startEnqueueSpans(ctx, params)
	err := b.mode.enqueue(ctx, o, params, now)
	if err != nil {
		// A caller that stopped waiting leaves its op with the writer, which may still be
		// writing its results: they are not read.
		endEnqueueSpans(spans, nil, err)
		return nil, err
	}
	results := o.results
	endEnqueueSpans(spans, results, nil)
	out := make([]Enqueued, len(results))
	var earliest time.Time
	for i, r := range results {
		out[i] = Enqueued{ID: r.ID, Duplicate: r.Duplicate, Unique: r.Unique, State: r.State, RunAt: r.RunAt}
		if !r.Duplicate {
			b.obs.JobEnqueued(params[i].Queue, params[i].Type)
		}
		if r.State == job.StateScheduled && (earliest.IsZero() || r.RunAt.Before(earliest)) {
			earliest = r.RunAt
		}
	}
	if !earliest.IsZero() {
		b.schedule(earliest)
	}
	return out, nil
}

// Get reads a job with its attempt history.
func (b *Broker) Get(ctx context.Context, id int64) (*job.Job, error) {
	j, err := b.st.JobGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return j, b.withConcurrency(ctx, j)
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
		b.publishChanged(tx, id)
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
	if before.BatchID != 0 {
		b.signal() // its batch's callbacks may be ready
	}
	b.obs.JobCancelled(before.Queue, before.Type)
	b.jobsChanged(changeAny, id)
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
		b.table.racedCancels[ref.JobID] = racedCancel{token: ref.Token, at: b.now()}
	}
	b.mu.Unlock()
	b.signalCapacity()
}
