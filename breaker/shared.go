package breaker

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Several brokers serving one database share one breaker per job type. The breaker's stored
// state is then the authority: every change is applied to the stored state while the database
// holds the type's breaker locked, by whichever broker the change happens on, and stored back in
// the same transaction. [Shared] is one such change: built from the stored state by [Set.Shared],
// it runs the same state machine as a Set's own breakers, and hands back the state to store and
// the transitions to report once it is stored. Each broker's Set is only a cache of the stored
// states then ([Set.Cache], [Set.Load]), read to plan dispatch.
//
// The stored state of a shared breaker is complete: besides the failures in the window it holds
// the probe slots in use, each with the job it was taken for and the broker that took it, so
// any broker that ends the job's lease (its result, its lease expiring, a cancel) frees the slot,
// also after the broker that dispatched the probe is gone; and the attempts whose failures it
// counted lately, so that an attempt's failure applied twice counts once ([Shared.Failure]).

// Shared is one breaker of several brokers, built from its stored state for the span of one
// database transaction. It is not safe for concurrent use while it is changed; once its
// transaction committed, the ops of one batch that shared it may each call TakeTransitions,
// Saved and Moved from their own goroutines.
type Shared struct {
	b      *breaker
	now    time.Time
	before Saved
	trans  []Transition

	takeMu sync.Mutex
	taken  int // transitions TakeTransitions returned
}

// Shared builds job type t's breaker from stored, its state as a broker stored it (nil: none is
// stored yet, the breaker is CLOSED in generation 1), and applies what time alone changed since:
// an OPEN breaker turning HALF_OPEN, probe slots timing out. It uses the Set's config for t and
// its clock; the Set itself is not changed (see [Set.Load]).
func (s *Set) Shared(t string, stored *Saved) (*Shared, error) {
	if t == "" {
		return nil, ErrEmptyType
	}
	b := s.newBreaker(t)
	if stored != nil {
		if stored.Type != t {
			return nil, fmt.Errorf("%w: a state of job type %q given for %q", ErrInvalidSaved, stored.Type, t)
		}
		if p := stored.problem(); p != "" {
			return nil, fmt.Errorf("%w: job type %q: %s", ErrInvalidSaved, t, p)
		}
		b.load(*stored)
	}
	sh := &Shared{b: b, now: s.clk.Now()}
	sh.before = b.full()
	b.advance(sh.now, sh.emit)
	return sh, nil
}

func (sh *Shared) emit(t Transition) { sh.trans = append(sh.trans, t) }

// Disabled reports whether the type's breaker is disabled by configuration: every method then
// does nothing, and Acquire grants untracked permits.
func (sh *Shared) Disabled() bool { return sh.b.cfg.Disabled }

// Allowance is [Set.Allowance] of this breaker.
func (sh *Shared) Allowance() int { return sh.b.allowance() }

// Acquire takes a permit for job, dispatched by the broker named holder; see [Set.Acquire]. A
// probe slot remembers both.
func (sh *Shared) Acquire(job int64, holder string) (Permit, bool) {
	return sh.b.acquire(sh.now, job, holder)
}

// Permit returns the permit job's lease holds. known is the permit the broker kept with the
// lease, or the zero Permit when it kept none (another broker dispatched the job, or this one
// before a restart). A kept permit is returned as it is. Otherwise it is the probe slot the job
// holds, if it holds one, or else, while CLOSED, a permit of the current generation: a job that
// holds no probe slot was dispatched while CLOSED, so if the breaker never left CLOSED its
// result counts, and if it left, the result is stale and counts nowhere. The one case this
// cannot tell apart is a job dispatched before the breaker went round back to CLOSED (a reset,
// or probes that succeeded): its failure counts in the new period.
func (sh *Shared) Permit(job int64, known Permit) Permit {
	b := sh.b
	switch {
	case known.Generation != 0 || b.cfg.Disabled:
		return known
	case b.state == StateClosed:
		return Permit{Type: b.typ, Generation: b.gen}
	}
	for _, pr := range b.probes {
		if pr.job == job {
			return Permit{Type: b.typ, Generation: b.gen, Probe: pr.id}
		}
	}
	return Permit{}
}

// Success is [Set.Success] on this breaker.
func (sh *Shared) Success(p Permit) { sh.b.success(p, sh.now, sh.emit) }

// Attempt names one attempt of a job: the job's id and the attempt's number.
type Attempt struct {
	Job    int64
	Number int
}

// SavedAttempt is an attempt whose failure a shared breaker counted, and when.
type SavedAttempt struct {
	Job     int64
	Attempt int
	At      time.Time
}

// Failure is [Set.Failure] on this breaker, for the failure of attempt a. A failure of an
// attempt whose failure the breaker counted already is ignored.
//
// One attempt's failure can reach a shared breaker twice: two transactions that both end the
// same lease (a worker's failure and the sweep of its expired lease, or the sweeps of two
// brokers that both lead for a moment) both write it, and the second is told by the store that
// its write is already applied, which cannot be told from applying it. A probe's failure is
// found once by its slot, and a failure of another generation is ignored, but a failure while
// CLOSED carries nothing that says it was counted. So the breaker remembers the attempts it
// counted, with the failures: at most Threshold of them within Window, which bounds the stored
// state as the failures do. The store could instead report "applied now" apart from "already
// applied", but every fenced write of both stores would have to, for the sake of this one
// caller; here the breaker itself knows, whichever broker and store path apply the failure.
//
// The attempts are kept across transitions, so a repeat is ignored also after the breaker went
// round back to CLOSED. One is forgotten once Threshold attempts were counted after it, or once
// it left Window and another failure is counted; a repeat of it then counts again. Repeats come
// within moments of each other, while the Threshold failures after one opened the breaker,
// where a failure while CLOSED is stale.
func (sh *Shared) Failure(p Permit, kind FailureKind, a Attempt) {
	sh.FailureNote(p, Note{Kind: kind, Job: a.Job}, a)
}

// FailureNote is [Shared.Failure] of n.Kind, keeping n among the breaker's last failures if it
// counts (see [Set.FailureNote]). In ratio mode the attempts are bounded by MinCalls instead of
// Threshold, and by SamplingWindow instead of Window.
func (sh *Shared) FailureNote(p Permit, n Note, a Attempt) {
	b := sh.b
	for _, c := range b.counted {
		if c.Job == a.Job && c.Attempt == a.Number {
			return
		}
	}
	if !b.failure(p, n, sh.now, sh.emit) {
		return
	}
	limit, span := b.cfg.Threshold, b.cfg.Window
	if b.cfg.Mode == ModeRatio {
		limit, span = b.cfg.MinCalls, b.cfg.SamplingWindow
	}
	b.counted = slices.DeleteFunc(b.counted, func(c SavedAttempt) bool { return !c.At.After(sh.now.Add(-span)) })
	b.counted = append(b.counted, SavedAttempt{Job: a.Job, Attempt: a.Number, At: sh.now})
	if n := len(b.counted) - limit; n > 0 {
		b.counted = slices.Delete(b.counted, 0, n)
	}
}

// Release is [Set.Release] on this breaker.
func (sh *Shared) Release(p Permit) { sh.b.release(p, sh.now, sh.emit) }

// Reset is [Set.Reset] on this breaker.
func (sh *Shared) Reset() error { return sh.b.admin(StateClosed, ReasonReset, sh.now, sh.emit) }

// Force is [Set.Force] on this breaker.
func (sh *Shared) Force(st State) error {
	if !st.Valid() {
		return fmt.Errorf("%w: %v", ErrInvalidState, st)
	}
	return sh.b.admin(st, ReasonForced, sh.now, sh.emit)
}

// Info describes the breaker as it is now.
func (sh *Shared) Info() Info { return sh.b.info(sh.now) }

// Saved is the breaker's complete state, probe slots included, to store. Its Version is one
// more than the stored one's when it changed.
func (sh *Shared) Saved() Saved {
	sv := sh.b.full()
	if !sv.equal(sh.before) {
		sv.Version++
	}
	return sv
}

// Changed reports whether the breaker's state differs from the one it was built from: only then
// need it be stored.
func (sh *Shared) Changed() bool { return !sh.b.full().equal(sh.before) }

// Moved reports whether what brokers decide dispatch by changed: the state, the generation or
// the number of probe slots in use. Failures counted while CLOSED do not move it, so other
// brokers need not hear of them.
func (sh *Shared) Moved() bool {
	b := sh.b
	return b.state != sh.before.State || b.gen != sh.before.Generation || len(b.probes) != len(sh.before.Probes)
}

// Transitions are the changes of state made since the breaker was built, in order, to report
// once its state is stored.
func (sh *Shared) Transitions() []Transition { return sh.trans }

// TakeTransitions returns the transitions not taken before, so that several holders of one
// Shared report each once.
func (sh *Shared) TakeTransitions() []Transition {
	sh.takeMu.Lock()
	defer sh.takeMu.Unlock()
	t := sh.trans[sh.taken:]
	sh.taken = len(sh.trans)
	return t
}

// Cache makes the Set a cache of shared breakers: their states are changed through [Shared]
// and given to the Set with [Load]. The Set then reports no transition of its own (the broker
// that stored a change reports it; a cache only catches up, e.g. when OpenFor has passed), and
// Acquire grants no probe slot, since a slot is only taken on the stored state. Call it before
// using the Set.
func (s *Set) Cache() {
	s.mu.Lock()
	s.cache = true
	s.mu.Unlock()
}

// Load replaces the Set's breakers of the given types with stored states, probe slots included,
// as they are: no transition is reported and the generation is kept. A state older (by Version)
// than the one the Set holds is skipped: it was read before the newer one was stored. Load
// checks every state first and loads nothing if one is invalid.
func (s *Set) Load(states ...Saved) error {
	for _, st := range states {
		if st.Type == "" {
			return fmt.Errorf("%w: Type is empty", ErrInvalidSaved)
		}
		if p := st.problem(); p != "" {
			return fmt.Errorf("%w: job type %q: %s", ErrInvalidSaved, st.Type, p)
		}
	}
	s.mu.Lock()
	for _, st := range states {
		if old := s.breakers[st.Type]; old != nil && old.version > st.Version {
			continue
		}
		b := s.newBreaker(st.Type)
		if !b.cfg.Disabled {
			b.load(st)
		}
		s.breakers[st.Type] = b
	}
	s.mu.Unlock()
	return nil
}

// load sets b to a stored state as it is.
func (b *breaker) load(st Saved) {
	b.state, b.gen, b.openedAt = st.State, st.Generation, st.OpenedAt
	b.failures = slices.Clone(st.Failures)
	slices.SortFunc(b.failures, func(x, y time.Time) int { return x.Compare(y) })
	if n := len(b.failures) - b.cfg.Threshold; n > 0 {
		b.failures = slices.Delete(b.failures, 0, n)
	}
	b.successes, b.lastProbe, b.version = st.ProbeSuccesses, st.LastProbe, st.Version
	b.counted = slices.Clone(st.Counted)
	b.loadNotes(st)
	b.win.buckets = nil
	if b.state == StateClosed && b.cfg.Mode == ModeRatio {
		b.win.load(st.Window)
	}
	b.probes = nil
	if b.state == StateHalfOpen {
		for _, p := range st.Probes {
			b.probes = append(b.probes, probe{id: p.ID, since: p.Since, job: p.Job, holder: p.Holder})
		}
	}
}

// full is b's complete state: saved with the probe slots.
func (b *breaker) full() Saved {
	sv := b.saved()
	sv.LastProbe, sv.Version, sv.Counted = b.lastProbe, b.version, slices.Clone(b.counted)
	for _, p := range b.probes {
		sv.Probes = append(sv.Probes, SavedProbe{ID: p.id, Since: p.since, Job: p.job, Holder: p.holder})
	}
	return sv
}

// equal compares two states, times by instant.
func (sv Saved) equal(o Saved) bool {
	return sv.Type == o.Type && sv.State == o.State && sv.OpenedAt.Equal(o.OpenedAt) &&
		sv.Generation == o.Generation && sv.ProbeSuccesses == o.ProbeSuccesses && sv.LastProbe == o.LastProbe &&
		sv.Version == o.Version && sv.Changed == o.Changed && sv.ChangedAt.Equal(o.ChangedAt) &&
		slices.EqualFunc(sv.Window, o.Window, func(a, b SavedBucket) bool {
			return a.Start.Equal(b.Start) && a.Calls == b.Calls && a.Failures == b.Failures
		}) &&
		slices.EqualFunc(sv.Recent, o.Recent, func(a, b Note) bool {
			return a.Job == b.Job && a.Kind == b.Kind && a.Message == b.Message && a.At.Equal(b.At)
		}) &&
		(sv.Trip == nil) == (o.Trip == nil) && (sv.Trip == nil || sv.Trip.At.Equal(o.Trip.At)) &&
		slices.EqualFunc(sv.Failures, o.Failures, time.Time.Equal) &&
		slices.EqualFunc(sv.Counted, o.Counted, func(a, b SavedAttempt) bool {
			return a.Job == b.Job && a.Attempt == b.Attempt && a.At.Equal(b.At)
		}) &&
		slices.EqualFunc(sv.Probes, o.Probes, func(a, b SavedProbe) bool {
			return a.ID == b.ID && a.Since.Equal(b.Since) && a.Job == b.Job && a.Holder == b.Holder
		})
}

// loadNotes sets b's last failures, trip and last change from a stored state.
func (b *breaker) loadNotes(st Saved) {
	b.recent = slices.Clone(st.Recent)
	if n := len(b.recent) - NoteLimit; n > 0 {
		b.recent = slices.Delete(b.recent, 0, n)
	}
	b.trip = st.Trip
	b.changedAt, b.changed = st.ChangedAt, st.Changed
}
