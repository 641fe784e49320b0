package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
	"github.com/jobwire/jobwire/triage"
)

// Hello is a worker's introduction on a new stream.
type Hello struct {
	WorkerID string
	Types    []string
	Queues   []string // empty: every queue
	Capacity int
	Held     []job.LeaseRef
	// Movable: the worker's connection spreads over several brokers, so it may be moved to
	// another (rebalance.go).
	Movable bool
	// Owner is who the stream authenticated as: the token's accessor id, or "" when auth is
	// off. Leases are granted to the worker id and owner together, and only a stream with both
	// the same adopts them (see Open).
	Owner string
}

// Session is one worker stream. The transport calls its methods from the stream's receive
// loop and sends what Next returns.
type Session struct {
	b        *Broker
	id       string
	workerID string
	owner    string
	types    []string
	queues   []string
	capacity int
	out      *outbox
	since    time.Time // when the stream opened
	movable  bool      // Hello.Movable

	// Guarded by b.mu.
	held     map[int64]*lease
	offered  int // slots promised to new jobs whose insert is being written (offer.go)
	draining bool
	closed   bool
	// halfClosed: the worker half-closed the stream (HalfClosed).
	halfClosed bool
}

// lease is a job a worker holds. A job that may be running whose stream closed keeps its lease
// with a nil sess until the worker reconnects and adopts it, or the lease expires (Close).
type lease struct {
	sess      *Session
	permit    breaker.Permit
	ref       job.LeaseRef
	job       *job.Job // without payload
	attempt   int      // the number this attempt has (or will have once started)
	started   bool
	startedAt time.Time
	// deadline is when the lease runs out unless extended, as far as this broker knows: in a
	// cluster, a lease this far past it has been ended by the leader (dropLostLeasesLocked).
	deadline time.Time
	storing  ending // the result or release being stored; endingNone while there is none
	failMsg  string // the reported failure's message, for the breaker's last failures
	// repeats are the sessions that sent the result again while it was being stored; each is
	// given the first one's answer too.
	repeats []*Session
	// fresh: job is the row as this broker's lease wrote it (not adopted from a read), and
	// progressed: a progress report was taken for this lease, through any stream of its
	// worker. A result's write then knows the whole row of a fresh lease that reported no
	// progress (finalSnapshot). A lease kept here saw every report: in a cluster, where the
	// worker may report through another broker, a closed stream's leases are forgotten
	// (forgetsClosed) and read again from the database when it comes back (not fresh).
	fresh, progressed bool
}

// Open registers a worker stream and adopts the leases it still holds from an earlier stream.
//
// A held lease is adopted only if its token is current and it was granted to the same worker
// id and owner as this stream's, so a token that leaked, or a guess, takes nothing from another
// worker. At most Capacity entries are looked at (each job once), and adopted leases count
// against the capacity like assigned ones. Every entry not adopted is listed in Welcome.lost.
func (b *Broker) Open(ctx context.Context, h Hello) (*Session, Welcome, error) {
	s := b.newSession(h)
	w := Welcome{LeaseDuration: b.cfg.LeaseDuration, HeartbeatInterval: b.cfg.HeartbeatInterval,
		MaxResultBytes: b.maxResultBytes()}
	// In a cluster the worker may have held its leases through another broker: those not in
	// this broker's memory are read from the database, in one transaction, before deciding.
	stored, err := b.mode.storedLeases(ctx, func() []job.LeaseRef { return b.missingLeases(h) })
	if err != nil {
		return nil, Welcome{}, fmt.Errorf("read the leases the worker holds: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shuttingDown {
		return nil, Welcome{}, ErrShuttingDown
	}
	b.table.nextSession++
	s.id = fmt.Sprintf("s%d", b.table.nextSession)
	w.SessionID = s.id
	// Alone, every current lease is in memory (granted by a round, or loaded at Start), so
	// adoption needs no storage: a Hello listing many leases costs map lookups, never a write
	// that other callers wait behind.
	for i, ref := range h.Held {
		if i >= h.Capacity || ref.Token.IsZero() || s.held[ref.JobID] != nil {
			w.Lost = append(w.Lost, ref)
			continue
		}
		if lost := b.adoptLocked(s, h, ref, stored); lost {
			w.Lost = append(w.Lost, ref)
		}
	}
	b.table.sessions = append(b.table.sessions, s)
	b.returnedLocked(s.workerID, b.clk.Now())
	b.signal() // it may serve types or queues no one served

	return s, w, nil
}

// newSession is the session of a worker stream that said h, not yet registered: Open names it
// and adds it to the rotation once it knows which leases it takes over.
func (b *Broker) newSession(h Hello) *Session {
	return &Session{
		b:        b,
		workerID: h.WorkerID,
		owner:    h.Owner,
		types:    slices.Clone(h.Types),
		queues:   slices.Clone(h.Queues),
		capacity: h.Capacity,
		movable:  h.Movable,
		out:      newOutbox(b.now),
		since:    b.now(),
		held:     make(map[int64]*lease),
	}
}

// missingLeases are the leases h lists (within its capacity) that this broker does not hold in
// memory: in a cluster, those are read from the database before Open decides on them.
func (b *Broker) missingLeases(h Hello) []job.LeaseRef {
	var missing []job.LeaseRef
	b.mu.Lock()
	for i, ref := range h.Held {
		if i < h.Capacity && !ref.Token.IsZero() && b.leaseLocked(ref) == nil {
			missing = append(missing, ref)
		}
	}
	b.mu.Unlock()
	return missing
}

// adoptLocked hands s the lease ref that its worker says it holds, if the lease is current and
// was granted to the same worker id and owner, and tells whether ref is lost to the worker
// instead. stored are the held jobs read from the database (see missingLeases). b.mu is held.
func (b *Broker) adoptLocked(s *Session, h Hello, ref job.LeaseRef, stored map[job.LeaseRef]*job.Job) (lost bool) {
	l := b.leaseLocked(ref)
	if j := stored[ref]; l == nil && j != nil && j.State.Held() && b.table.leases[ref.JobID] == nil &&
		j.WorkerID == h.WorkerID && j.LeaseOwner == h.Owner {
		// Current in the database: this broker holds it from now on.
		l = heldLease(nil, ref, j)
		b.table.leases[ref.JobID] = l
	}
	if l == nil {
		// A lease whose result was stored is not lost: the worker sends the result again
		// and is answered with its ResultAck.
		_, kept := b.table.recent.get(ref, b.now())
		return !kept && !resultStored(stored[ref], h.WorkerID)
	}
	if l.job.WorkerID != h.WorkerID || l.job.LeaseOwner != h.Owner {
		return true
	}
	if l.storing == endingRelease {
		// Its job is being handed back (Session.Close, a Release): that write ends the lease
		// whatever the worker says now, and the job may be leased to another worker before
		// its answer reaches this broker.
		return true
	}
	// The same lease from the worker's earlier stream: take it over, permit and all.
	if l.sess != nil {
		delete(l.sess.held, ref.JobID)
	}
	l.sess = s
	s.held[ref.JobID] = l
	return false
}

// heldLease is the lease of a stored LEASED or RUNNING job, held by sess (nil: by no session).
func heldLease(sess *Session, ref job.LeaseRef, j *job.Job) *lease {
	l := &lease{sess: sess, ref: ref, job: j, attempt: j.Attempts + 1, deadline: j.LeaseExpiresAt}
	if j.State == job.StateRunning {
		l.started, l.startedAt, l.attempt = true, j.StartedAt, j.Attempts
	}
	return l
}

// ID names the session in logs.
func (s *Session) ID() string { return s.id }

// freeLocked is how many more jobs the stream may be handed: its capacity less the leases it
// holds and the slots promised to offers being written (offer.go). Call it with b.mu held.
func (s *Session) freeLocked() int { return s.capacity - len(s.held) - s.offered }

// Capacity is how many jobs the worker said it can hold at once.
func (s *Session) Capacity() int { return s.capacity }

// Overflowed is closed when the worker stopped reading its stream and the broker gave up on it
// (ErrOutboxFull): the transport must end the stream, even while a send to the worker blocks.
func (s *Session) Overflowed() <-chan struct{} { return s.out.overflow }

// Next waits for messages to send to the worker. It returns an error once the session is closed.
func (s *Session) Next(ctx context.Context) ([]Message, error) {
	msgs, n, err := s.out.next(ctx)
	if n >= OutboxGrantBytes/2 {
		// Dispatch held this session back while its outbox was full (planRound): now that
		// the worker reads again, a round may give it jobs.
		s.b.signalCapacity()
	}
	return s.withParents(ctx, msgs), err
}

// currentLocked returns the session's lease for ref, or nil when ref is not current.
func (s *Session) currentLocked(ref job.LeaseRef) *lease {
	if l := s.b.leaseLocked(ref); l != nil && l.sess == s {
		return l
	}
	return nil
}

// leaseLocked returns the lease for ref whoever holds it, or nil when ref is not current.
func (b *Broker) leaseLocked(ref job.LeaseRef) *lease {
	l := b.table.leases[ref.JobID]
	if l == nil || l.ref.Token != ref.Token {
		return nil
	}
	return l
}

func (s *Session) refuse(ref job.LeaseRef, about About, reason Refusal, msg string) {
	s.out.push(Refused{Ref: ref, About: about, Reason: reason, Message: msg})
}

// refusal turns a failed write into the answer the worker gets: busy storage is worth a retry.
// Either way the worker sends it again: the write was rolled back, and the message says why.
func refusal(err error) (Refusal, string) {
	if errors.Is(err, storeretry.ErrBusy) {
		return RefusedBusy, "storage is busy, send this again later: " + err.Error()
	}
	return RefusedBusy, "could not store this, send it again later: " + err.Error()
}

const staleLease = "lease is not current: the job was finished, cancelled, expired or leased again"

// ranOut is the refusal of a heartbeat read late after the lease's deadline.
func ranOut(late time.Duration) string {
	return fmt.Sprintf("lease ran out %s before this heartbeat was read: it is not extended, and the job is free for another attempt", late)
}

// startRanOut is the refusal of a Started read late after the lease's deadline.
func startRanOut(late time.Duration) string {
	return fmt.Sprintf("lease ran out %s before this Started was read: the job is not started, and it is free for another attempt", late)
}

// Started records that user code began: the job becomes RUNNING and the attempt counts, and
// the lease runs a whole lease duration from when the Started was read.
//
// A lease whose deadline had passed by then is not started, though no sweep has ended it yet
// (a broker frozen past the deadline reads the Started queued meanwhile when it resumes): it
// ran out before the attempt began, and its worker has given the job up by its own count from
// the Assignment. The start's write refuses it (the same moment is compared in storage, where
// a heartbeat stored before it may still have extended the lease); the worker is told the
// lease is lost (Refused, stale), and the lease is left as it was to the sweep (in a cluster,
// the leader's sweep and dropLostLeasesLocked), which hands the job back to PENDING with no
// attempt spent.
func (s *Session) Started(ref job.LeaseRef) {
	b := s.b
	now := b.now()
	b.mu.Lock()
	l := s.currentLocked(ref)
	if l == nil || l.started {
		b.mu.Unlock()
		if l == nil {
			s.refuse(ref, AboutStarted, RefusedStale, staleLease)
		}
		return
	}
	// late: the lease ran out before this read, unless a heartbeat being stored extended it.
	// Such a start is counted only once stored.
	was, late := l.deadline, !l.deadline.After(now)
	l.started, l.startedAt, l.deadline = true, now, now.Add(b.cfg.LeaseDuration)
	timeout, attempt := l.job.AttemptTimeout, l.attempt
	queue, typ, wait := l.job.Queue, l.job.Type, now.Sub(l.job.RunAt)
	if !late {
		b.obs.AttemptStarted(queue, typ, wait)
	}
	b.mu.Unlock()
	b.submit(&startOp{s: s, params: store.JobStartParams{Ref: ref, Attempt: attempt, Now: now,
		LeaseUntil: now.Add(b.cfg.LeaseDuration), AttemptDeadline: now.Add(timeout)},
		late: late, was: was, queue: queue, typ: typ, wait: wait})
}

// startOp stores a Started (commit.Starter: with the batch's other starts in one statement,
// or not at all when its result joins it).
type startOp struct {
	s      *Session
	params store.JobStartParams
	// late: the lease ran out before the Started was read; was is the deadline it had.
	late       bool
	was        time.Time
	queue, typ string
	wait       time.Duration
	applied    bool
}

func (o *startOp) Name() string                       { return "start" }
func (o *startOp) StartParams() *store.JobStartParams { return &o.params }
func (o *startOp) Started(applied bool)               { o.applied = applied }

func (o *startOp) Apply(tx store.Tx) error {
	var err error
	o.applied, err = tx.JobStart(&o.params)
	return err
}

func (o *startOp) Done(err error) {
	s, b, ref, late, now, was := o.s, o.s.b, o.params.Ref, o.late, o.params.Now, o.was
	defer b.jobsChanged(changeRunning, ref.JobID) // LEASED to RUNNING, or nothing
	ok := o.applied
	if late && (ok || err != nil) { // started, or left for its result to record
		b.obs.AttemptStarted(o.queue, o.typ, o.wait)
	}
	switch {
	case err != nil:
		// The job stays LEASED in storage; its result still records the attempt.
		b.log.Warn("could not record job start", "job", ref.JobID, "err", err)
	case !ok:
		b.mu.Lock()
		l := b.leaseLocked(ref)
		if l != nil && late {
			// Ran out before the Started was read: the lease is as it was, for the sweep.
			l.started, l.startedAt, l.deadline = false, time.Time{}, was
			b.mu.Unlock()
			s.refuse(ref, AboutStarted, RefusedStale, startRanOut(now.Sub(was)))
			return
		}
		if l != nil {
			b.endLeaseLocked(l, permitReleased, 0)
		}
		b.mu.Unlock()
		s.refuse(ref, AboutStarted, RefusedStale, staleLease)
	}
}

// Heartbeat extends the leases the session still holds, each from when the heartbeat was read.
//
// A lease whose deadline had passed by then is not extended, though no sweep has ended it yet
// (a broker frozen or overloaded past the deadline reads heartbeats late): it ran out, and its
// job is free for another attempt, while its worker has given it up by its own count. The
// worker is told it is lost (Refused, stale), and the lease is left to the sweep (in a cluster,
// the leader's sweep and dropLostLeasesLocked), which ends it as expired, counts that against
// the breaker and sends a running job's worker a Cancel.
func (s *Session) Heartbeat(refs []job.LeaseRef) {
	b := s.b
	now := b.now()
	var current []job.LeaseRef
	b.mu.Lock()
	for _, r := range refs {
		if s.currentLocked(r) != nil {
			current = append(current, r)
		} else {
			s.refuse(r, AboutHeartbeat, RefusedStale, staleLease)
		}
	}
	b.mu.Unlock()
	if len(current) == 0 {
		return
	}
	b.submit(&heartbeatOp{s: s, current: current, now: now, until: now.Add(b.cfg.LeaseDuration)})
}

// heartbeatOp extends the current leases of a Heartbeat, each to until.
type heartbeatOp struct {
	s          *Session
	current    []job.LeaseRef
	now, until time.Time
	extended   []job.LeaseRef
}

func (o *heartbeatOp) Name() string        { return "heartbeat" }
func (o *heartbeatOp) WritesJobs() []int64 { return leaseJobs(o.current) }

func (o *heartbeatOp) Apply(tx store.Tx) error {
	var err error
	o.extended, err = tx.JobExtendLeases(o.current, o.now, o.until)
	return err
}

func (o *heartbeatOp) Done(err error) {
	s, b := o.s, o.s.b
	if err != nil {
		for _, r := range o.current {
			reason, msg := refusal(err)
			s.refuse(r, AboutHeartbeat, reason, msg)
		}
		return
	}
	b.mu.Lock()
	for _, r := range o.current {
		l := b.leaseLocked(r)
		if slices.Contains(o.extended, r) {
			if l != nil {
				l.deadline = o.until
			}
			continue
		}
		if l != nil && !l.deadline.After(o.now) {
			// Ran out before the heartbeat was read: the sweep ends it.
			s.refuse(r, AboutHeartbeat, RefusedStale, ranOut(o.now.Sub(l.deadline)))
			continue
		}
		if l != nil {
			b.endLeaseLocked(l, permitReleased, 0)
		}
		s.refuse(r, AboutHeartbeat, RefusedStale, staleLease)
	}
	b.mu.Unlock()
	s.out.push(HeartbeatAck{Extended: o.extended, Deadline: o.until})
}

// Result stores how an attempt ended (failure nil means success) and acknowledges it with
// the decision once committed.
func (s *Session) Result(ref job.LeaseRef, failure *job.Failure) { s.Finish(ref, failure, nil) }

// Finish is Result with what a success returned (result, stored with it; see outcome.go).
func (s *Session) Finish(ref job.LeaseRef, failure *job.Failure, result []byte) {
	s.finish(ref, failure, result, false)
}

// finish stores how an attempt ended; quiet: its worker never saw the lease (Undeliverable),
// so it is neither acknowledged nor refused.
func (s *Session) finish(ref job.LeaseRef, failure *job.Failure, result []byte, quiet bool) {
	b := s.b
	now := b.now()
	failure, result = b.checkResult(failure, result)
	e, ok := s.takeResult(ref, failure, now, quiet)
	if !ok {
		return
	}
	d := triage.Success()
	a := job.Attempt{Number: e.number, WorkerID: s.workerID, StartedAt: e.startedAt, FinishedAt: now,
		Outcome: job.OutcomeSucceeded}
	if failure != nil {
		d, a = b.triageFailure(e.job, a, *failure, now)
	}
	if e.unstarted {
		a.Number-- // attempts count only from a start
	}
	p := finishParams(ref, e.job, d, a, now)
	p.Unstarted = e.unstarted
	if p.State == job.StateSucceeded {
		p.Result = result
	}
	o := newResultOp(s, ref, e, failure, d, p)
	o.quiet = quiet
	b.submit(o)
}

// endingAttempt is what a result reads of the lease whose attempt it ends.
type endingAttempt struct {
	job       *job.Job
	number    int
	startedAt time.Time
	permit    breaker.Permit
	// frees: the lease's end frees room under its queue's cap.
	frees bool
	// known: the job's row is known but for what the result's write stores (finalSnapshot).
	known bool
	// unstarted: the job never started under the lease (a quiet result for a lease its
	// worker never saw): it spends no attempt and says nothing of its type's health.
	unstarted bool
}

// takeResult marks ref's lease as storing the result that failure describes and returns its
// attempt, or answers the result itself (false): a repeat, a second outcome, a stale lease.
// A quiet result (its worker never saw the lease) is not answered: a lease that ended
// meanwhile (its job cancelled) leaves nothing to do.
func (s *Session) takeResult(ref job.LeaseRef, failure *job.Failure, now time.Time, quiet bool) (endingAttempt, bool) {
	b := s.b
	b.mu.Lock()
	l := s.currentLocked(ref)
	if l == nil && quiet {
		b.mu.Unlock()
		return endingAttempt{}, false
	}
	if l == nil {
		repeated := s.repeatedResultLocked(ref, failure == nil)
		b.mu.Unlock()
		if !repeated && !s.storedResult(b.ctx, ref, failure == nil) {
			s.refuse(ref, AboutResult, RefusedStale, staleLease)
		}
		return endingAttempt{}, false
	}
	if l.finishing() {
		this := endingOf(failure)
		if l.storing != this {
			// Not a repeat: the first outcome wins, and a worker sending another one (or a
			// result for a lease it is releasing) is told so rather than given the first's ack.
			b.mu.Unlock()
			s.refuse(ref, AboutResult, RefusedStale, l.storing.differs())
			return endingAttempt{}, false
		}
		// A re-sent result while the first is being stored: it gets the first one's answer.
		l.repeats = append(l.repeats, s)
		b.mu.Unlock()
		return endingAttempt{}, false
	}
	l.storing = endingOf(failure)
	e := endingAttempt{job: l.job, number: l.attempt, startedAt: l.startedAt, permit: l.permit,
		frees: b.freesRoomLocked(l.job.Queue) || b.mode.sharedQueues() && l.job.ConcurrencyKey != "",
		known: l.fresh && !l.progressed && ref.Token.Seq == 1 && l.job.AttemptBase == 0 && l.job.RequeuedAt.IsZero()}
	if !l.started {
		e.notStarted(b.obs, now, quiet)
	}
	b.mu.Unlock()
	return e, true
}

// notStarted settles the start of an attempt whose lease had none: its worker skipped Started,
// and the attempt still counts, from now; or (quiet) its worker never saw the lease, and
// nothing ran, for no time.
func (e *endingAttempt) notStarted(obs Observer, now time.Time, quiet bool) {
	e.startedAt, e.unstarted = now, quiet
	if !quiet {
		obs.AttemptStarted(e.job.Queue, e.job.Type, now.Sub(e.job.RunAt))
	}
}

// resultOp stores a result's decision and answers its worker once committed, which frees the
// worker's slot (slotFreer). It ends the lease (commit.Finisher), a success may be stored
// with others at commit (commit.Succeeder), and one that nothing else waits on may wait for a
// producer's next enqueue to share its commit (commit.Deferrer).
type resultOp struct {
	s   *Session
	ref job.LeaseRef
	endingAttempt
	failed bool // the attempt failed (the worker sent a failure)
	quiet  bool // the worker never saw the lease: it gets no answer (Undeliverable)
	d      triage.Decision
	params *store.JobFinishParams
	// How the result settles the breaker permit, which a shared breaker does in the result's
	// own write (settles).
	how     permitEnd
	kind    breaker.FailureKind
	msg     string
	settles writeSettles

	ch        breakerChanges
	succeeded bool
	// unread is why the store could not say whether a success stored at commit applied (its
	// answer, sent with COMMIT, was lost or unreadable): the result is refused as failed by
	// storage, and its worker sends it again, which the store then finds applied or not.
	unread error
}

func newResultOp(s *Session, ref job.LeaseRef, e endingAttempt, failure *job.Failure, d triage.Decision,
	params *store.JobFinishParams) *resultOp {
	b := s.b
	o := &resultOp{s: s, ref: ref, endingAttempt: e, failed: failure != nil, d: d, params: params,
		how: permitSucceeded}
	if failure != nil {
		o.msg = failure.Message
		if failure.ErrorType != "" {
			o.msg = failure.ErrorType + ": " + o.msg
		}
	}
	switch {
	case d.Verdict == triage.Succeeded:
	case e.unstarted:
		o.how = permitReleased
	case params.Attempt.Outcome == job.OutcomeTimeout:
		o.how, o.kind = permitFailed, breaker.Timeout
	default:
		o.how, o.kind = permitFailed, breakerKind(d.Kind)
	}
	o.settles = b.mode.breakers().settlesInWrite(e.permit, e.job.Type)
	return o
}

func (o *resultOp) Name() string           { return "result" }
func (o *resultOp) Finishes() job.LeaseRef { return o.ref }
func (o *resultOp) frees() *Session        { return o.s }

// Success is the result's write when it may be stored with other successes: it frees no queue
// room and its permit is not settled by a write of its own (settlesAlone). Stored at commit.
func (o *resultOp) Success() *store.JobFinishParams {
	if o.d.Verdict != triage.Succeeded || o.settles == settlesAlone || o.endingAttempt.frees || o.s.b.watchedElsewhere(o.ref.JobID) {
		return nil // a job another broker watches publishes its change in its write (watchcluster.go)
	}
	return o.params
}

// MayWait lets a success wait one batch for a producer's next enqueue (commit.Deferrer) when
// nothing else waits on its commit: the last round leased every ready job it could see
// (readyMaybe), so no job waits for the slot it frees; no client watches a job; and it ends no
// batch, whose callbacks its commit would enqueue. The jobs that depend on it become ready with
// its commit, at most one batch (commit.StartWindow) later.
func (o *resultOp) MayWait() bool {
	b := o.s.b
	return o.params.Batch == 0 && !b.writing.readyMaybe.Load() && b.Watched() == 0 && o.Success() != nil
}

func (o *resultOp) Succeeded(applied bool, unread error) { o.succeeded, o.unread = applied, unread }

func (o *resultOp) Apply(tx store.Tx) error {
	o.ch.reset()
	o.unread = nil // answered here, not at commit
	var err error
	o.succeeded, err = tx.JobFinish(o.params)
	if err != nil || !o.succeeded {
		return err
	}
	if o.params.State == job.StatePending || o.endingAttempt.frees {
		tx.Publish(readyEvent)
	}
	if o.params.State == job.StateScheduled {
		tx.Publish(scheduledEvent(o.params.RunAt))
	}
	o.s.b.publishChanged(tx, o.ref.JobID)
	return o.s.b.settleShared(tx, &o.ch, o.job.Type, o.ref.JobID, o.number, o.permit, o.how, o.kind, o.msg)
}

// breakersCommitted hands the cache the shared breakers the result's write changed, and holds
// a success its breaker counts later (successes.go). Done runs it on the writer goroutine.
func (o *resultOp) breakersCommitted() {
	o.s.b.applyBreakerChanges(o.ch)
	if o.succeeded && o.how == permitSucceeded && o.settles == settlesSuccessLater {
		o.s.b.holdSuccess(o.job.Type, o.ref.JobID)
	}
}

// Done answers the worker, and the repeats of its result that came meanwhile.
func (o *resultOp) Done(err error) {
	b := o.s.b
	if err == nil && o.unread != nil {
		err = o.unread // stored with others at commit, and its answer not known
	}
	if err == nil && o.succeeded && o.known && o.params.State.Final() {
		defer b.svc.watches.finished(o.ref.JobID, o.finalSnapshot)
	} else {
		defer b.jobsChanged(changeAny, o.ref.JobID)
	}
	if err == nil {
		o.breakersCommitted()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.leaseLocked(o.ref)
	answered := []*Session{o.s}
	if o.quiet {
		answered = nil
	}
	if cur != nil {
		answered = append(answered, cur.repeats...)
		cur.repeats = nil
	}
	switch {
	case err != nil:
		if cur != nil {
			cur.storing = endingNone
		}
		reason, msg := refusal(err)
		for _, to := range answered {
			to.refuse(o.ref, AboutResult, reason, msg)
		}
	case !o.succeeded:
		if cur != nil {
			b.endLeaseLocked(cur, permitReleased, 0)
		}
		for _, to := range answered {
			to.refuse(o.ref, AboutResult, RefusedStale, staleLease)
		}
	default:
		o.acknowledgeLocked(cur, answered)
	}
}

// finalSnapshot is the job as the result's write left it, as a watch sends it: the fields of
// JobOutcomes that WatchJobsResponse carries (not the lease's, which a final job's has none of):
// the job as leased, and what the write stored (store.JobFinishParams, the same columns on
// either store). Only for a known attempt (endingAttempt.known): the job's first lease, by
// this broker, with no progress reported, so no column a watch sends was written since the
// lease but by this write. It spares a watched job's read after the broker's own final write.
func (o *resultOp) finalSnapshot() *job.Job {
	j, p := o.job, o.params
	s := &job.Job{ID: j.ID, Type: j.Type, Queue: j.Queue, Priority: j.Priority, State: p.State,
		Attempts: p.Attempt.Number, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt, CreatedAt: j.CreatedAt,
		FinishedAt:     time.Unix(0, p.Now.UnixNano()).UTC(), // as stored: nanoseconds
		IdempotencyKey: j.IdempotencyKey, AttemptTimeout: j.AttemptTimeout, DeadReason: j.DeadReason,
		LastErrorType: j.LastErrorType, LastErrorMessage: j.LastErrorMessage, UniqueKey: j.UniqueKey,
		UniqueStates: j.UniqueStates, BatchID: j.BatchID, RateKey: j.RateKey}
	if p.State == job.StateSucceeded {
		if len(p.Result) > 0 {
			s.Result = p.Result // a success without one stores NULL
		}
		return s
	}
	// A failure's write: its dead reason, and its error when it has a type (store.Tx.JobFinish).
	s.DeadReason = p.DeadReason
	if p.Attempt.ErrorType != "" {
		s.LastErrorType, s.LastErrorMessage = p.Attempt.ErrorType, p.Attempt.Message
	}
	return s
}

// acknowledgeLocked ends the lease of a stored result and sends its decision to answered.
func (o *resultOp) acknowledgeLocked(cur *lease, answered []*Session) {
	b := o.s.b
	if cur != nil {
		cur.failMsg = o.msg
		b.endLeaseLocked(cur, o.how, o.kind)
	}
	end := AttemptEnd{Verdict: o.d.Verdict, Dead: o.d.Reason, Duration: o.params.Now.Sub(o.startedAt),
		Unstarted: o.unstarted}
	if o.failed {
		end.Cause = failureCause(o.d.Kind)
	}
	b.obs.AttemptEnded(o.job.Queue, o.job.Type, end)
	ack := ResultAck{Ref: o.ref, Decision: o.d}
	b.table.recent.add(ack, !o.failed, b.now())
	for _, to := range answered {
		to.out.push(ack)
	}
	switch {
	case o.d.Verdict == triage.Retry && o.params.State == job.StateScheduled:
		b.schedule(o.d.RetryAt)
		b.signalCapacity()
	case o.d.Verdict == triage.Retry:
		b.signal() // ready again at once
	default:
		b.signalCapacity()
	}
}

// finishParams turns a decision into the write that stores it.
func finishParams(ref job.LeaseRef, j *job.Job, d triage.Decision, a job.Attempt, now time.Time) *store.JobFinishParams {
	p := &store.JobFinishParams{Ref: ref, Queue: j.Queue, Type: j.Type, Attempt: a, Now: now, Batch: batchOf(j)}
	switch d.Verdict {
	case triage.Succeeded:
		p.State = job.StateSucceeded
	case triage.Dead:
		p.State, p.DeadReason = job.StateDead, d.Reason
	case triage.Retry:
		p.State, p.RunAt = job.StateScheduled, d.RetryAt
		if !d.RetryAt.After(now) {
			p.State = job.StatePending
		}
	}
	return p
}

// Release hands back a job whose user code never started.
func (s *Session) Release(ref job.LeaseRef) { s.release(ref, false) }

// handBack releases a lease whose assignment the broker did not send: the worker never saw
// it, so it is told nothing, whatever becomes of the release.
func (s *Session) handBack(ref job.LeaseRef) { s.release(ref, true) }

func (s *Session) release(ref job.LeaseRef, quiet bool) {
	b := s.b
	b.mu.Lock()
	l := s.currentLocked(ref)
	if l == nil || l.started || l.finishing() {
		b.mu.Unlock()
		if !quiet {
			s.refuse(ref, AboutRelease, RefusedStale, "only a lease whose job has not started can be released")
		}
		return
	}
	l.storing = endingRelease
	held := []heldProbe{{ref: ref, typ: l.job.Type, permit: l.permit}}
	b.mu.Unlock()
	b.submit(&releaseOp{s: s, held: held, quiet: quiet})
}

// releaseOp stores a Release, which frees its worker's slot once committed (slotFreer).
type releaseOp struct {
	s     *Session
	held  []heldProbe // the one lease released
	quiet bool        // the worker never saw the lease (handBack): it is not answered
	ok    bool
	ch    breakerChanges
}

func (o *releaseOp) Name() string        { return "release" }
func (o *releaseOp) WritesJobs() []int64 { return heldJobs(o.held) }
func (o *releaseOp) frees() *Session     { return o.s }

func (o *releaseOp) Apply(tx store.Tx) error {
	released, err := o.s.b.releaseHeld(tx, &o.ch, o.held)
	o.ok = err == nil && released[0]
	return err
}

func (o *releaseOp) Done(err error) {
	s, b, ref := o.s, o.s.b, o.held[0].ref
	if err == nil {
		b.applyBreakerChanges(o.ch)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.leaseLocked(ref)
	if err != nil {
		if cur != nil {
			cur.storing = endingNone
		}
		if !o.quiet {
			reason, msg := refusal(err)
			s.refuse(ref, AboutRelease, reason, msg)
		}
		return
	}
	if cur != nil {
		b.endLeaseLocked(cur, permitReleased, 0)
	}
	if !o.ok && !o.quiet {
		s.refuse(ref, AboutRelease, RefusedStale, staleLease)
	}
	b.signal()
}

// Drain marks the session as taking no more work.
func (s *Session) Drain() {
	s.b.mu.Lock()
	s.draining = true
	s.b.mu.Unlock()
}

// HalfClosed notes that the worker half-closed its stream: every message it sent was read, so
// a job whose Started did not arrive never started on it, and the worker, done with the stream,
// holds none of those. The transport calls it before Close.
func (s *Session) HalfClosed() {
	s.b.mu.Lock()
	s.halfClosed = true
	s.b.mu.Unlock()
}

// Close ends the session when its stream ends. A job it held that never started goes back to
// PENDING at once only if it provably never started: its Assignment never left the broker, or
// the worker half-closed the stream (HalfClosed). Any other job may be running on the worker
// even though its Started did not arrive (sent as the stream broke, or lost with it: a move, a
// reset connection, a broker that froze); it keeps its lease like a running one, so that the
// worker, reconnecting, adopts it and delivers its result (Hello.held), and it expires
// otherwise, with no attempt spent if it never started. Running jobs keep their leases too.
func (s *Session) Close() {
	b := s.b
	b.mu.Lock()
	if s.closed {
		b.mu.Unlock()
		return
	}
	s.closed = true
	unsent := s.out.closeUnsent()
	var release []heldProbe
	for _, l := range s.held {
		switch {
		case l.finishing():
			l.sess = nil
		case !l.started && (s.halfClosed || unsent[l.ref]):
			// The lease, and a probe's slot with it, ends once its job is back in line
			// (handBackOp.Done): a probe slot freed before would go to the job behind it.
			release = append(release, heldProbe{ref: l.ref, typ: l.job.Type, permit: l.permit})
			l.storing = endingRelease
			l.sess = nil
		case b.mode.forgetsClosed():
			// Its worker may come back on any broker, which adopts the lease from the
			// database (Open): this one forgets it rather than hold a copy that goes stale.
			b.endLeaseLocked(l, permitReleased, 0)
		default:
			l.sess = nil
		}
	}
	s.held = map[int64]*lease{}
	b.table.sessions = slices.DeleteFunc(b.table.sessions, func(x *Session) bool { return x == s })
	b.mu.Unlock()
	if len(release) == 0 {
		return
	}
	// If this cannot be stored, they stay LEASED until their lease expires; the sweeper
	// returns them then.
	b.submit(&handBackOp{b: b, back: release, failed: "could not hand back jobs of a closed stream"})
}

// finishing: a result or a release of the lease is being stored.
func (l *lease) finishing() bool { return l.storing != endingNone }
