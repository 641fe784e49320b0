package breaker

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// Unlimited is the [Set.Allowance] of a type whose breaker does not limit dispatch (CLOSED or
// disabled).
const Unlimited = -1

// Errors of the admin methods.
var (
	// ErrDisabled: the type's breaker is disabled by configuration, so there is nothing to reset
	// or force.
	ErrDisabled = errors.New("breaker disabled for this job type")
	// ErrInvalidState: Force was given a value that is not a State.
	ErrInvalidState = errors.New("invalid breaker state")
	// ErrEmptyType: an admin method was given an empty job type.
	ErrEmptyType = errors.New("job type is empty")
	// ErrInvalidSaved: Restore was given a record it cannot trust; nothing was restored.
	ErrInvalidSaved = errors.New("invalid saved breaker state")
)

// Permit is the right to dispatch one job, taken with [Set.Acquire] and ended with exactly one of
// [Set.Success], [Set.Failure] or [Set.Release]. It is a small value so the broker can keep one per
// in-flight job, and store its three fields with the lease if it wants results of jobs in flight
// across a restart to keep counting.
//
// The zero Permit, and any permit with Generation 0, is untracked: every result for it is ignored.
// Rebuilding such a permit for a job leased before a restart is therefore always safe; it just
// means that job's result will not move the breaker. A permit rebuilt with its stored fields counts
// if the breaker's generation has not changed since (restore keeps the generation of CLOSED and
// OPEN breakers; a restored HALF_OPEN breaker starts a new generation, see [ReasonRestored]).
type Permit struct {
	// Type is the job type.
	Type string
	// Generation is the breaker's generation when the permit was granted.
	Generation int64
	// Probe is the probe's number within its generation while HALF_OPEN, and 0 for a permit
	// granted while CLOSED.
	Probe int64
}

// IsProbe reports whether the permit holds one of the HALF_OPEN probe slots.
func (p Permit) IsProbe() bool { return p.Probe != 0 }

// Transition describes one change of a breaker's state, passed to the callback given to [NewSet].
type Transition struct {
	Type     string
	From, To State
	Reason   Reason
	// At is when the change was applied. A lazy OPEN to HALF_OPEN change is applied at the first
	// call into the Set after OpenFor has passed.
	At time.Time
	// Generation is the breaker's generation after the change.
	Generation int64
	// Saved is the breaker's durable state after the change, ready to store.
	Saved Saved
}

// Saved is the durable state of one breaker, from [Set.Snapshot] or [Transition.Saved], to be
// given back to [Set.Restore] after a restart. Probes in flight are deliberately absent there:
// after a restart nobody can tell whether they are still running. A breaker several brokers
// share ([Shared]) keeps them, in LastProbe and Probes.
type Saved struct {
	Type  string
	State State
	// OpenedAt is when the breaker last opened; zero while CLOSED.
	OpenedAt time.Time
	// Generation counts transitions; it is at least 1.
	Generation int64
	// Failures are the times of counted failures still within the window, oldest first.
	Failures []time.Time
	// ProbeSuccesses is how many probes succeeded in a row in the current HALF_OPEN period.
	ProbeSuccesses int
	// LastProbe is the last probe number given out in this generation, and Probes the probe
	// slots in use: only in the state of a shared breaker (see [Shared]).
	LastProbe int64        `json:",omitempty"`
	Probes    []SavedProbe `json:",omitempty"`
	// Counted are the job attempts whose failures a shared breaker counted lately, so that an
	// attempt's failure applied again counts once (see [Shared.Failure]).
	Counted []SavedAttempt `json:",omitempty"`
	// Version counts the stores of a shared breaker's state, so that a cache never goes back
	// to an older one it reads late (see [Set.Load]).
	Version int64 `json:",omitempty"`
	// Window is a ratio-mode breaker's sliding window of calls while CLOSED, oldest first.
	Window []SavedBucket `json:",omitempty"`
	// Recent are the last counted failures, oldest first, and Trip why the breaker last
	// opened, until an operator reset or forced it.
	Recent []Note `json:",omitempty"`
	Trip   *Trip  `json:",omitempty"`
	// ChangedAt and Changed are when and why the breaker last changed state.
	ChangedAt time.Time `json:",omitzero"`
	Changed   Reason    `json:",omitempty"`
}

// SavedProbe is a probe slot in use of a shared breaker.
type SavedProbe struct {
	ID int64
	// Since is when the slot was taken: it is freed ProbeTimeout later whatever happens.
	Since time.Time
	// Job is the job dispatched as the probe, and Holder the broker that dispatched it: any
	// broker that ends the job's lease settles the slot, even after the holder is gone.
	Job    int64
	Holder string
}

// Info is what an operator sees of one breaker.
type Info struct {
	Type     string
	State    State
	Disabled bool
	// FailuresInWindow counts counted failures within Window (count mode: at most Threshold
	// are kept), or within SamplingWindow (ratio mode, while CLOSED).
	FailuresInWindow int
	// OpenedAt is when the breaker last opened; zero while CLOSED.
	OpenedAt time.Time
	// NextProbeAt is when the next probe may be dispatched: OpenedAt+OpenFor while OPEN; while
	// HALF_OPEN, now if a slot is free, else when the oldest probe's slot times out. Zero while
	// CLOSED.
	NextProbeAt    time.Time
	Generation     int64
	ProbesInFlight int
	ProbeSuccesses int
	// Mode is the breaker's mode, and Calls the calls its sliding window holds (ratio mode,
	// while CLOSED), FailuresInWindow of them failures.
	Mode  Mode
	Calls int
	// Trip is why the breaker last opened; nil once an operator reset or forced it.
	Trip *Trip
	// ChangedAt and Changed are when and why the breaker last changed state (zero: never).
	ChangedAt time.Time
	Changed   Reason
}

// probe is one probe slot in use.
type probe struct {
	id    int64
	since time.Time
	// job and holder are the job the slot was taken for and the broker that took it; set only
	// for a breaker shared by several brokers (see [Shared]), where a slot outlives the broker.
	job    int64
	holder string
}

// breaker is the state of one job type's breaker. It is guarded by Set.mu.
type breaker struct {
	typ       string
	cfg       Config
	state     State
	gen       int64
	openedAt  time.Time
	failures  []time.Time    // counted failures, at most cfg.Threshold, oldest first
	successes int            // probe successes in a row, HALF_OPEN only
	probes    []probe        // slots in use, HALF_OPEN only
	lastProbe int64          // last probe number given out in this generation
	version   int64          // stores of a shared breaker's state (Saved.Version)
	counted   []SavedAttempt // attempts whose failures a shared breaker counted (Saved.Counted)
	win       window         // calls while CLOSED, ratio mode only
	recent    []Note         // last counted failures, at most NoteLimit
	trip      *Trip          // why it last opened, until an operator's change
	changedAt time.Time      // when and why it last changed state
	changed   Reason
}

// Set holds the breakers of every job type. It is safe for concurrent use: the dispatcher and the
// result path call it from different goroutines. All methods are cheap (one mutex, no I/O) except
// the transition callback, which runs outside the lock.
type Set struct {
	clk          clock.Clock
	def          Config
	perType      map[string]Config
	onTransition func(Transition)

	mu       sync.Mutex
	breakers map[string]*breaker
	pending  []Transition // transitions not yet given to onTransition
	draining bool         // a goroutine is calling onTransition
	cache    bool         // see Cache
}

// NewSet returns a Set whose breakers use def, or perType[t] for job type t. Configs are not
// merged: each perType entry is complete (build it from [DefaultConfig] or def). Breakers of the
// types in perType exist from the start, so they are listed before their first job; others are
// created at their first job.
//
// onTransition, if not nil, is called once for every transition, in the order the transitions
// happened, one call at a time and without any lock of the Set held, so it may call back into the
// Set. It runs on whichever goroutine is calling into the Set at the time, possibly after the call
// that caused the transition has returned on another goroutine. It should be quick: persist the
// Saved state, log, and return.
func NewSet(clk clock.Clock, def Config, perType map[string]Config, onTransition func(Transition)) (*Set, error) {
	if clk == nil {
		return nil, errors.New("breaker: nil clock")
	}
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("default breaker config: %w", err)
	}
	s := &Set{
		clk:          clk,
		def:          def,
		perType:      make(map[string]Config, len(perType)),
		onTransition: onTransition,
		breakers:     make(map[string]*breaker),
	}
	for t, c := range perType {
		if t == "" {
			return nil, fmt.Errorf("breaker config: %w", ErrEmptyType)
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("breaker config for job type %q: %w", t, err)
		}
		s.perType[t] = c
		s.breakers[t] = s.newBreaker(t)
	}
	return s, nil
}

// ConfigFor returns the configuration of job type t's breaker.
func (s *Set) ConfigFor(t string) Config {
	if c, ok := s.perType[t]; ok {
		return c
	}
	return s.def
}

func (s *Set) newBreaker(t string) *breaker {
	cfg := s.ConfigFor(t)
	return &breaker{typ: t, cfg: cfg, state: StateClosed, gen: 1, win: newWindow(cfg.SamplingWindow)}
}

// get returns t's breaker, creating it if create is set; otherwise it may return nil.
func (s *Set) get(t string, create bool) *breaker {
	b := s.breakers[t]
	if b == nil && create {
		b = s.newBreaker(t)
		s.breakers[t] = b
	}
	return b
}

// Allowance is how many jobs of type t the dispatcher may lease right now: [Unlimited] while
// CLOSED or disabled, 0 while OPEN, and the free probe slots while HALF_OPEN. It applies a due
// OPEN to HALF_OPEN change. The answer is advice for sizing a lease query; each job still needs
// [Set.Acquire], which is the authority.
func (s *Set) Allowance(t string) int {
	s.mu.Lock()
	n := Unlimited
	if b := s.get(t, false); b != nil {
		b.advance(s.clk.Now(), s.emit)
		n = b.allowance()
	}
	s.mu.Unlock()
	s.flush()
	return n
}

func (b *breaker) allowance() int {
	if b.cfg.Disabled {
		return Unlimited
	}
	switch b.state {
	case StateOpen:
		return 0
	case StateHalfOpen:
		return max(0, b.cfg.HalfOpenProbes-len(b.probes))
	}
	return Unlimited
}

// Acquire takes a permit for one job of type t about to be dispatched. ok is false while OPEN, and
// while HALF_OPEN with every probe slot in use; the job must then stay undispatched. A disabled
// breaker always grants an untracked permit (Generation 0).
func (s *Set) Acquire(t string) (p Permit, ok bool) {
	s.mu.Lock()
	b := s.get(t, true)
	now := s.clk.Now()
	b.advance(now, s.emit)
	if !s.cache || b.state == StateClosed {
		p, ok = b.acquire(now, 0, "")
	}
	s.mu.Unlock()
	s.flush()
	return p, ok
}

// acquire takes a permit for job (0: not known yet) dispatched by holder; see Set.Acquire.
func (b *breaker) acquire(now time.Time, job int64, holder string) (Permit, bool) {
	switch {
	case b.cfg.Disabled:
		return Permit{Type: b.typ}, true
	case b.state == StateClosed:
		return Permit{Type: b.typ, Generation: b.gen}, true
	case b.state == StateHalfOpen && len(b.probes) < b.cfg.HalfOpenProbes:
		b.lastProbe++
		b.probes = append(b.probes, probe{id: b.lastProbe, since: now, job: job, holder: holder})
		return Permit{Type: b.typ, Generation: b.gen, Probe: b.lastProbe}, true
	}
	return Permit{}, false
}

// Release ends a permit whose job never reached user code: a stale lease, a cancellation before
// start, a worker that refused the job, shutdown. It counts as neither success nor failure and
// frees the probe slot if p is a probe.
func (s *Set) Release(p Permit) {
	s.mu.Lock()
	if b := s.get(p.Type, false); b != nil {
		b.release(p, s.clk.Now(), s.emit)
	}
	s.mu.Unlock()
	s.flush()
}

func (b *breaker) release(p Permit, now time.Time, emit func(Transition)) {
	if b.current(p, now, emit) && p.IsProbe() {
		b.takeProbe(p.Probe)
	}
}

// Success ends a permit whose job succeeded. In ratio mode a success while CLOSED is a call in the
// sliding window. In count mode it changes nothing while CLOSED: one success among many failures
// does not prove a dependency healthy, so failures age out of the window instead. A probe success
// counts toward CloseAfter and may close the breaker.
func (s *Set) Success(p Permit) {
	s.mu.Lock()
	if b := s.get(p.Type, false); b != nil {
		b.success(p, s.clk.Now(), s.emit)
	}
	s.mu.Unlock()
	s.flush()
}

func (b *breaker) success(p Permit, now time.Time, emit func(Transition)) {
	if !b.current(p, now, emit) {
		return
	}
	if !p.IsProbe() {
		if b.state == StateClosed && b.cfg.Mode == ModeRatio {
			b.call(now, false)
			b.tripOnRatio(now, emit)
		}
		return
	}
	if b.takeProbe(p.Probe) {
		b.successes++
		if b.successes >= b.cfg.CloseAfter {
			b.transition(StateClosed, ReasonProbesSucceeded, now, emit)
		}
	}
}

// Failure ends a permit whose job failed with kind. A failure of a kind outside Config.Count is
// not a failure to the breaker (and frees a probe's slot): in ratio mode it is a call that did not
// fail, in count mode it is neutral. Otherwise, while CLOSED it is recorded and opens the breaker
// when the failure ratio reaches FailureRatio over at least MinCalls calls (ratio mode), at
// Threshold failures within Window (count mode), or at once if it is Fatal under OpenOnFatal; a
// probe's failure reopens the breaker.
//
// Results are ignored when p is stale (another generation, Generation 0, or a probe whose slot was
// already freed by its timeout or by Release).
func (s *Set) Failure(p Permit, kind FailureKind) { s.FailureNote(p, Note{Kind: kind}) }

// FailureNote is [Set.Failure] of n.Kind, keeping n (the job and its error message) among the
// breaker's last failures if it counts.
func (s *Set) FailureNote(p Permit, n Note) {
	s.mu.Lock()
	if b := s.get(p.Type, false); b != nil {
		b.failure(p, n, s.clk.Now(), s.emit)
	}
	s.mu.Unlock()
	s.flush()
}

// failure applies a failure and reports whether it was counted.
func (b *breaker) failure(p Permit, n Note, now time.Time, emit func(Transition)) bool {
	if !b.current(p, now, emit) {
		return false
	}
	kind := n.Kind
	switch {
	case p.IsProbe():
		if b.takeProbe(p.Probe) && b.cfg.counts(kind) {
			b.recordFailure(now)
			b.note(n, now)
			b.transition(StateOpen, ReasonProbeFailed, now, emit)
			return true
		}
	case b.state == StateClosed && !b.cfg.counts(kind):
		if b.cfg.Mode == ModeRatio {
			b.call(now, false)
			b.tripOnRatio(now, emit)
		}
	case b.state == StateClosed:
		b.note(n, now)
		if b.cfg.Mode == ModeRatio {
			b.call(now, true)
		} else {
			b.recordFailure(now)
		}
		switch {
		case kind == Fatal && b.cfg.OpenOnFatal:
			b.transition(StateOpen, ReasonFatal, now, emit)
		case b.cfg.Mode == ModeRatio:
			b.tripOnRatio(now, emit)
		case b.failuresIn(now) >= b.cfg.Threshold:
			b.transition(StateOpen, ReasonThreshold, now, emit)
		}
		return true
	}
	return false
}

// call records a call that ended while CLOSED in a ratio-mode breaker's window.
func (b *breaker) call(now time.Time, failed bool) { b.win.add(now, failed) }

// tripOnRatio opens a ratio-mode breaker whose window holds at least MinCalls calls of which at
// least FailureRatio failed.
func (b *breaker) tripOnRatio(now time.Time, emit func(Transition)) {
	calls, failures := b.win.totals(now)
	if calls >= b.cfg.MinCalls && float64(failures) >= b.cfg.FailureRatio*float64(calls) {
		b.transition(StateOpen, ReasonRatio, now, emit)
	}
}

// note keeps a counted failure among the last NoteLimit.
func (b *breaker) note(n Note, now time.Time) {
	n.At, n.Message = now, trimNote(n.Message)
	b.recent = append(b.recent, n)
	if k := len(b.recent) - NoteLimit; k > 0 {
		b.recent = slices.Delete(b.recent, 0, k)
	}
}

// tripOf is why b opens now for reason: what its window holds and its last failures.
func (b *breaker) tripOf(reason Reason, now time.Time) *Trip {
	t := &Trip{Mode: b.cfg.Mode, Reason: reason, At: now, Last: slices.Clone(b.recent)}
	if b.cfg.Mode == ModeRatio {
		t.Calls, t.Failures = b.win.totals(now)
		t.Window = b.cfg.SamplingWindow
		if t.Calls > 0 {
			t.Ratio = float64(t.Failures) / float64(t.Calls)
		}
	} else {
		t.Failures, t.Window = b.failuresIn(now), b.cfg.Window
	}
	return t
}

// current reports whether p is of b's current generation, after applying due changes.
func (b *breaker) current(p Permit, now time.Time, emit func(Transition)) bool {
	if p.Generation == 0 || b.cfg.Disabled {
		return false
	}
	b.advance(now, emit)
	return b.gen == p.Generation
}

// takeProbe frees probe id's slot and reports whether it was still in use.
func (b *breaker) takeProbe(id int64) bool {
	if b.state != StateHalfOpen {
		return false
	}
	for i, pr := range b.probes {
		if pr.id == id {
			b.probes = slices.Delete(b.probes, i, i+1)
			return true
		}
	}
	return false
}

func (b *breaker) recordFailure(now time.Time) {
	b.failures = append(b.failures, now)
	if n := len(b.failures) - b.cfg.Threshold; n > 0 {
		b.failures = slices.Delete(b.failures, 0, n)
	}
}

// inWindow reports whether a failure at f still counts at now. A failure exactly Window old does
// not.
func (b *breaker) inWindow(f, now time.Time) bool { return f.After(now.Add(-b.cfg.Window)) }

func (b *breaker) failuresIn(now time.Time) int {
	n := 0
	for _, f := range b.failures {
		if b.inWindow(f, now) {
			n++
		}
	}
	return n
}

// advance applies the changes that time alone causes: OPEN turns HALF_OPEN once OpenFor has
// passed, and probe slots older than ProbeTimeout are freed. Failures that left the window are
// dropped to keep memory bounded.
func (b *breaker) advance(now time.Time, emit func(Transition)) {
	if b.cfg.Disabled {
		return
	}
	b.failures = slices.DeleteFunc(b.failures, func(f time.Time) bool { return !b.inWindow(f, now) })
	b.win.trim(now)
	if b.state == StateOpen && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		b.transition(StateHalfOpen, ReasonOpenElapsed, now, emit)
	}
	if b.state == StateHalfOpen {
		b.probes = slices.DeleteFunc(b.probes, func(pr probe) bool {
			return !now.Before(pr.since.Add(b.cfg.ProbeTimeout))
		})
	}
}

// transition moves b to state to, bumps its generation (making every outstanding permit stale),
// and hands the change to emit. It panics on a transition the state machine does not allow,
// which would be a bug in this package.
func (b *breaker) transition(to State, reason Reason, now time.Time, emit func(Transition)) {
	from := b.state
	if !legal(from, to, reason) {
		panic(fmt.Sprintf("breaker: illegal transition %v -> %v (%v) for job type %q", from, to, reason, b.typ))
	}
	if to == StateOpen && (from == StateClosed || reason == ReasonProbeFailed) {
		b.trip = b.tripOf(reason, now)
	}
	if reason == ReasonReset || reason == ReasonForced {
		b.trip = nil
	}
	if reason != ReasonRestored {
		b.changedAt, b.changed = now, reason
	}
	b.state = to
	b.gen++
	b.win.buckets = nil // a new period of CLOSED starts with an empty window
	b.probes = b.probes[:0]
	b.lastProbe = 0
	if reason != ReasonRestored {
		b.successes = 0
	}
	switch to {
	case StateClosed:
		b.failures = nil
		b.openedAt = time.Time{}
	case StateOpen:
		b.openedAt = now
	}
	emit(Transition{Type: b.typ, From: from, To: to, Reason: reason, At: now, Generation: b.gen, Saved: b.saved()})
}

// emit queues a transition of one of the Set's breakers for onTransition. A cache reports none:
// the broker that stored a change reports it (see Cache).
func (s *Set) emit(t Transition) {
	if s.onTransition != nil && !s.cache {
		s.pending = append(s.pending, t)
	}
}

// flush gives queued transitions to onTransition, one at a time and in order. A goroutine that
// finds another one already delivering leaves its transitions to it; this also makes calls into
// the Set from inside the callback safe.
func (s *Set) flush() {
	for {
		s.mu.Lock()
		if s.draining || len(s.pending) == 0 {
			s.mu.Unlock()
			return
		}
		s.draining = true
		t := s.pending[0]
		s.pending[0] = Transition{}
		s.pending = s.pending[1:]
		s.mu.Unlock()
		s.deliver(t)
	}
}

func (s *Set) deliver(t Transition) {
	defer func() {
		s.mu.Lock()
		s.draining = false
		s.mu.Unlock()
	}()
	s.onTransition(t)
}

// NextChange applies every change already due and returns the earliest time at which time alone
// will change what the dispatcher may do: an OPEN breaker turning HALF_OPEN, or a probe slot timing
// out. ok is false when no such change is pending. The returned time is always after now, so the
// dispatcher can arm a timer with it and call NextChange again when it fires.
func (s *Set) NextChange() (at time.Time, ok bool) {
	s.mu.Lock()
	now := s.clk.Now()
	for _, b := range s.breakers {
		b.advance(now, s.emit)
		if b.cfg.Disabled {
			continue
		}
		var next time.Time
		switch b.state {
		case StateOpen:
			next = b.openedAt.Add(b.cfg.OpenFor)
		case StateHalfOpen:
			for _, pr := range b.probes {
				if d := pr.since.Add(b.cfg.ProbeTimeout); next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
		if !next.IsZero() && (!ok || next.Before(at)) {
			at, ok = next, true
		}
	}
	s.mu.Unlock()
	s.flush()
	return at, ok
}

// Info describes job type t's breaker; ok is false if the Set has no breaker for t yet (no job of
// the type has been dispatched and it has no config of its own), which means CLOSED.
func (s *Set) Info(t string) (info Info, ok bool) {
	s.mu.Lock()
	if b := s.get(t, false); b != nil {
		now := s.clk.Now()
		b.advance(now, s.emit)
		info, ok = b.info(now), true
	}
	s.mu.Unlock()
	s.flush()
	return info, ok
}

// List describes every breaker, sorted by job type.
func (s *Set) List() []Info {
	s.mu.Lock()
	now := s.clk.Now()
	out := make([]Info, 0, len(s.breakers))
	for _, b := range s.breakers {
		b.advance(now, s.emit)
		out = append(out, b.info(now))
	}
	s.mu.Unlock()
	s.flush()
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

func (b *breaker) info(now time.Time) Info {
	i := Info{
		Type:             b.typ,
		State:            b.state,
		Disabled:         b.cfg.Disabled,
		FailuresInWindow: b.failuresIn(now),
		OpenedAt:         b.openedAt,
		Generation:       b.gen,
		ProbesInFlight:   len(b.probes),
		ProbeSuccesses:   b.successes,
		Mode:             b.cfg.Mode,
		Trip:             b.trip,
		ChangedAt:        b.changedAt,
		Changed:          b.changed,
	}
	if b.cfg.Mode == ModeRatio && b.state == StateClosed {
		i.Calls, i.FailuresInWindow = b.win.totals(now)
	}
	switch {
	case b.cfg.Disabled:
	case b.state == StateOpen:
		i.NextProbeAt = b.openedAt.Add(b.cfg.OpenFor)
	case b.state == StateHalfOpen && len(b.probes) < b.cfg.HalfOpenProbes:
		i.NextProbeAt = now
	case b.state == StateHalfOpen:
		for _, pr := range b.probes {
			if d := pr.since.Add(b.cfg.ProbeTimeout); i.NextProbeAt.IsZero() || d.Before(i.NextProbeAt) {
				i.NextProbeAt = d
			}
		}
	}
	return i
}

// Reset closes job type t's breaker and forgets its failures. Permits granted before are stale.
func (s *Set) Reset(t string) (Info, error) {
	return s.admin(t, StateClosed, ReasonReset)
}

// Force puts job type t's breaker in state st, as if it had just entered it: OPEN restarts the
// OpenFor wait, HALF_OPEN starts a fresh probe round, CLOSED forgets failures. Permits granted
// before are stale. Forcing the current state is allowed and also starts afresh.
func (s *Set) Force(t string, st State) (Info, error) {
	if !st.Valid() {
		return Info{}, fmt.Errorf("%w: %v", ErrInvalidState, st)
	}
	return s.admin(t, st, ReasonForced)
}

func (s *Set) admin(t string, st State, reason Reason) (Info, error) {
	if t == "" {
		return Info{}, ErrEmptyType
	}
	s.mu.Lock()
	b := s.get(t, true)
	now := s.clk.Now()
	if err := b.admin(st, reason, now, s.emit); err != nil {
		s.mu.Unlock()
		return Info{}, err
	}
	info := b.info(now)
	s.mu.Unlock()
	s.flush()
	return info, nil
}

// admin is an operator's change of b to st: a Reset or a Force, of a Set's breaker or a
// [Shared] one. A disabled breaker has no state to change.
func (b *breaker) admin(st State, reason Reason, now time.Time, emit func(Transition)) error {
	if b.cfg.Disabled {
		return fmt.Errorf("%w: %q", ErrDisabled, b.typ)
	}
	b.advance(now, emit)
	b.transition(st, reason, now, emit)
	return nil
}

// Snapshot returns the durable state of every enabled breaker, sorted by job type. Failures while
// CLOSED change without a transition, so call it at shutdown (and periodically, if losing a few
// recent failures on a crash matters) as well as storing [Transition.Saved].
func (s *Set) Snapshot() []Saved {
	s.mu.Lock()
	now := s.clk.Now()
	out := make([]Saved, 0, len(s.breakers))
	for _, b := range s.breakers {
		if b.cfg.Disabled {
			continue
		}
		b.advance(now, s.emit)
		out = append(out, b.saved())
	}
	s.mu.Unlock()
	s.flush()
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

func (b *breaker) saved() Saved {
	return Saved{
		Type:           b.typ,
		State:          b.state,
		OpenedAt:       b.openedAt,
		Generation:     b.gen,
		Failures:       slices.Clone(b.failures),
		ProbeSuccesses: b.successes,
		Window:         b.win.saved(),
		Recent:         slices.Clone(b.recent),
		Trip:           b.trip,
		ChangedAt:      b.changedAt,
		Changed:        b.changed,
	}
}

// Restore loads states saved by a previous run, replacing the breakers of those types; call it at
// startup before dispatching. It checks every record first and restores nothing if one is invalid.
// Records of types whose breaker is now disabled are skipped.
//
// A restored OPEN breaker stays OPEN until OpenFor after its original OpenedAt (or after now, if
// OpenedAt is in the future), so a restart does not slam a dependency just found broken. A restored CLOSED breaker keeps the failures still in
// its window under the current config. A restored HALF_OPEN breaker has no probes in flight and
// moves to a new generation (a HALF_OPEN to HALF_OPEN transition with [ReasonRestored], reported to
// the callback), so permits of probes granted before the restart are stale.
func (s *Set) Restore(saved []Saved) error {
	seen := make(map[string]bool, len(saved))
	var errs []string
	for i, sv := range saved {
		switch {
		case sv.Type == "":
			errs = append(errs, fmt.Sprintf("record %d: Type is empty", i))
		case seen[sv.Type]:
			errs = append(errs, fmt.Sprintf("record %d: Type %q appears twice", i, sv.Type))
		default:
			if p := sv.problem(); p != "" {
				errs = append(errs, fmt.Sprintf("record %d (%q): %s", i, sv.Type, p))
			}
		}
		seen[sv.Type] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidSaved, strings.Join(errs, "; "))
	}

	s.mu.Lock()
	now := s.clk.Now()
	for _, sv := range saved {
		b := s.newBreaker(sv.Type)
		if b.cfg.Disabled {
			s.breakers[sv.Type] = b
			continue
		}
		b.state = sv.State
		b.gen = sv.Generation
		b.openedAt = sv.OpenedAt
		switch {
		case b.state == StateClosed:
			b.openedAt = time.Time{}
		case b.openedAt.After(now):
			// Saved by a clock that ran ahead: do not keep the type blocked beyond OpenFor.
			b.openedAt = now
		}
		b.failures = slices.Clone(sv.Failures)
		slices.SortFunc(b.failures, func(x, y time.Time) int { return x.Compare(y) })
		b.failures = slices.DeleteFunc(b.failures, func(f time.Time) bool { return !b.inWindow(f, now) })
		if n := len(b.failures) - b.cfg.Threshold; n > 0 {
			b.failures = slices.Delete(b.failures, 0, n)
		}
		b.loadNotes(sv)
		if b.state == StateClosed && b.cfg.Mode == ModeRatio {
			b.win.load(sv.Window)
			b.win.trim(now)
		}
		if b.state == StateHalfOpen {
			b.successes = sv.ProbeSuccesses
			b.transition(StateHalfOpen, ReasonRestored, now, s.emit)
		}
		s.breakers[sv.Type] = b
	}
	s.mu.Unlock()
	s.flush()
	return nil
}

// problem says what makes a saved state (of a named type) unusable, or "" if nothing does.
func (sv Saved) problem() string {
	switch {
	case !sv.State.Valid():
		return fmt.Sprintf("State %v is not a state", sv.State)
	case sv.Generation < 1:
		return fmt.Sprintf("Generation must be at least 1, got %d", sv.Generation)
	case sv.State == StateOpen && sv.OpenedAt.IsZero():
		return "OPEN without OpenedAt"
	case sv.ProbeSuccesses < 0:
		return "ProbeSuccesses is negative"
	}
	return ""
}
