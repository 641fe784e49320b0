// Package breaker keeps one circuit breaker per job type so the broker can stop dispatching a type
// whose jobs fail as a group (a dependency is down) instead of burning retries against it.
//
// A breaker has three states:
//
//	CLOSED ──(the failure ratio over SamplingWindow reaches FailureRatio, at least MinCalls calls;
//	          or, in count mode, Threshold counted failures within Window; or a FATAL failure
//	          with OpenOnFatal)──▶ OPEN
//	OPEN ──(OpenFor has passed)──▶ HALF_OPEN
//	HALF_OPEN ──(CloseAfter probe successes)──▶ CLOSED
//	HALF_OPEN ──(a probe fails with a counted kind)──▶ OPEN
//	any ──(Reset)──▶ CLOSED, any ──(Force)──▶ any
//
// While CLOSED the broker dispatches freely; while OPEN it dispatches no job of the type; while
// HALF_OPEN it dispatches at most HalfOpenProbes jobs at a time ("probes") to test the dependency.
//
// Every job the broker dispatches holds a [Permit] taken with [Set.Acquire] and ends it with exactly
// one of [Set.Success], [Set.Failure] or [Set.Release]. Release is for a permit whose job never
// reached user code (stale lease, cancellation before start, shutdown): it counts neither way and
// frees a probe slot, so a HALF_OPEN breaker is never left with every slot taken by jobs that will
// never report. A probe that never reports at all frees its slot after ProbeTimeout.
//
// Every transition increments the breaker's generation, and a permit remembers the generation it
// was granted in. A result whose permit is from another generation is stale and ignored: the
// breaker has already acted on the evidence of that era. In particular a probe that reports after
// the breaker reopened or closed cannot move it again.
//
// The package is pure logic: time comes from an injected [clock.Clock], and durable state is handed
// to the caller as plain values ([Set.Snapshot], [Set.Restore], the transition callback) to store.
package breaker

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is a breaker's state. The numbers equal the API's BreakerState values and may be stored;
// never renumber. The zero value is not a state.
type State int

const (
	// StateClosed: jobs of the type are dispatched freely; counted failures are recorded.
	StateClosed State = 1
	// StateOpen: no job of the type is dispatched until OpenFor has passed since OpenedAt.
	StateOpen State = 2
	// StateHalfOpen: at most HalfOpenProbes probe jobs run at once; their results decide whether
	// the breaker closes or reopens.
	StateHalfOpen State = 3
)

var stateNames = map[State]string{
	StateClosed:   "CLOSED",
	StateOpen:     "OPEN",
	StateHalfOpen: "HALF_OPEN",
}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Valid reports whether s is one of the three states.
func (s State) Valid() bool {
	_, ok := stateNames[s]
	return ok
}

// ParseState reads a state name such as "HALF_OPEN" (case-sensitive).
func ParseState(name string) (State, bool) {
	for s, n := range stateNames {
		if n == name {
			return s, true
		}
	}
	return 0, false
}

// FailureKind is why a job of the type failed, as far as the breaker cares. The values are bits so
// that a set of kinds fits in [Kinds]; the zero value is not a kind.
type FailureKind uint8

const (
	// Transient: user code failed with a passing condition (timeouts from a dependency, 5xx, ...).
	Transient FailureKind = 1 << iota
	// Fatal: user code failed with a code or payload bug.
	Fatal
	// LeaseExpired: the worker stopped renewing its lease (it crashed, hung or lost the broker).
	LeaseExpired
	// Timeout: the attempt ran past its attempt timeout.
	Timeout
)

var kindNames = []struct {
	k    FailureKind
	name string
}{
	{Transient, "transient"},
	{Fatal, "fatal"},
	{LeaseExpired, "lease_expired"},
	{Timeout, "timeout"},
}

func (k FailureKind) String() string {
	for _, n := range kindNames {
		if n.k == k {
			return n.name
		}
	}
	return fmt.Sprintf("FailureKind(%d)", uint8(k))
}

// ParseFailureKind reads a kind name as used in configuration: "transient", "fatal",
// "lease_expired" or "timeout".
func ParseFailureKind(name string) (FailureKind, bool) {
	for _, n := range kindNames {
		if n.name == name {
			return n.k, true
		}
	}
	return 0, false
}

// Kinds is a set of failure kinds.
type Kinds uint8

// AllKinds counts every kind of failure, the default: a dependency that is down shows up as
// transient errors, as workers hanging until their lease expires, and as attempt timeouts alike.
const AllKinds = Kinds(Transient | Fatal | LeaseExpired | Timeout)

// KindsOf returns the set holding ks.
func KindsOf(ks ...FailureKind) Kinds {
	var s Kinds
	for _, k := range ks {
		s |= Kinds(k)
	}
	return s
}

// Has reports whether k is in the set.
func (s Kinds) Has(k FailureKind) bool { return k != 0 && s&Kinds(k) == Kinds(k) }

func (s Kinds) String() string {
	var parts []string
	for _, n := range kindNames {
		if s.Has(n.k) {
			parts = append(parts, n.name)
		}
	}
	if rest := s &^ AllKinds; rest != 0 {
		parts = append(parts, fmt.Sprintf("Kinds(%#x)", uint8(rest)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Mode is how a CLOSED breaker decides to open.
type Mode int

const (
	// ModeRatio opens when the share of counted failures among the calls of the last
	// SamplingWindow reaches FailureRatio, once at least MinCalls calls ended in it. Calls are
	// kept in [WindowBuckets] buckets of SamplingWindow/WindowBuckets, so the window slides one
	// bucket at a time.
	ModeRatio Mode = 1
	// ModeCount opens at Threshold counted failures within Window, however many calls
	// succeeded beside them.
	ModeCount Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeRatio:
		return "ratio"
	case ModeCount:
		return "count"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads a mode name as used in configuration: "ratio" or "count".
func ParseMode(name string) (Mode, bool) {
	for _, m := range []Mode{ModeRatio, ModeCount} {
		if m.String() == name {
			return m, true
		}
	}
	return 0, false
}

// Config tunes the breaker of one job type. Start from [DefaultConfig] (ratio mode) or
// [CountConfig] and change fields: a zero Config is not valid.
type Config struct {
	// Mode says which of the fields below decide when a CLOSED breaker opens.
	Mode Mode
	// FailureRatio (ratio mode) is the share of counted failures among the calls of the
	// sampling window, above 0 and at most 1, at which the breaker opens.
	FailureRatio float64
	// MinCalls (ratio mode) is how many calls must have ended within SamplingWindow before the
	// ratio is trusted.
	MinCalls int
	// SamplingWindow (ratio mode) is how far back calls count, to the bucket (see ModeRatio).
	SamplingWindow time.Duration
	// Threshold (count mode) is how many counted failures within Window open the breaker.
	Threshold int
	// Window (count mode) is how far back failures count. A failure exactly Window old no
	// longer counts.
	Window time.Duration
	// OpenFor is how long the breaker stays OPEN before it lets probes through.
	OpenFor time.Duration
	// ProbeTimeout frees the slot of a probe that has not reported after this long, so a lost
	// worker cannot keep a HALF_OPEN breaker shut. Set it above the type's attempt timeout so that
	// a hanging probe is reported as a Timeout failure before its slot is given away.
	ProbeTimeout time.Duration
	// HalfOpenProbes is how many probes may be in flight at once while HALF_OPEN.
	HalfOpenProbes int
	// CloseAfter is how many probe successes in a row close the breaker.
	CloseAfter int
	// Count is the set of failure kinds that count as failures (toward FailureRatio or
	// Threshold) and that reopen the breaker when a probe fails with them. In ratio mode a
	// failure of another kind is a call that did not fail (its user code ran and answered: the
	// dependency is not to blame); in count mode it is neutral.
	Count Kinds
	// OpenOnFatal opens the breaker at the first Fatal failure, whatever Count says.
	OpenOnFatal bool
	// Disabled turns the breaker off for the type: it never blocks dispatch and records nothing.
	// The other fields are then ignored.
	Disabled bool
}

// Defaults, as documented on [DefaultConfig] and [CountConfig].
const (
	DefaultFailureRatio   = 0.5
	DefaultMinCalls       = 20
	DefaultSamplingWindow = 30 * time.Second
	DefaultThreshold      = 5
	DefaultWindow         = 60 * time.Second
	DefaultOpenFor        = 30 * time.Second
	DefaultProbeTimeout   = 30 * time.Second
	DefaultHalfOpenProbes = 1
	DefaultCloseAfter     = 1
)

// DefaultKinds are the kinds a default breaker counts: those a dependency that is down shows as
// (transient errors, workers hanging until their lease expires, attempt timeouts). A fatal
// failure is one payload's or one code path's bug, not the type's; see docs/breaker.md.
const DefaultKinds = Kinds(Transient | LeaseExpired | Timeout)

// DefaultConfig is ratio mode: it opens when half of the calls ended within the last 30s failed
// transiently, by lease expiry or by timeout, once at least 20 calls ended in that window; it
// stays open 30s, then lets one probe through at a time; one probe success closes it, and a
// probe silent for 30s frees its slot. The count-mode fields hold [CountConfig]'s values, so
// switching Mode alone gives count mode's defaults.
func DefaultConfig() Config {
	c := CountConfig()
	c.Mode = ModeRatio
	c.Count = DefaultKinds
	return c
}

// CountConfig is count mode, the default before ratio mode existed: it opens after 5 failures of
// any kind within 60s, then behaves as [DefaultConfig].
func CountConfig() Config {
	return Config{
		Mode:           ModeCount,
		FailureRatio:   DefaultFailureRatio,
		MinCalls:       DefaultMinCalls,
		SamplingWindow: DefaultSamplingWindow,
		Threshold:      DefaultThreshold,
		Window:         DefaultWindow,
		OpenFor:        DefaultOpenFor,
		ProbeTimeout:   DefaultProbeTimeout,
		HalfOpenProbes: DefaultHalfOpenProbes,
		CloseAfter:     DefaultCloseAfter,
		Count:          AllKinds,
	}
}

// ErrInvalidConfig is wrapped by every error of [Config.Validate].
var ErrInvalidConfig = errors.New("invalid breaker config")

// Validate reports the first field that makes c unusable. A disabled config is always valid.
func (c Config) Validate() error {
	if c.Disabled {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch c.Mode {
	case ModeRatio:
		switch {
		case !(c.FailureRatio > 0 && c.FailureRatio <= 1): // also refuses NaN
			return bad("FailureRatio must be above 0 and at most 1, got %v", c.FailureRatio)
		case c.MinCalls < 1:
			return bad("MinCalls must be at least 1, got %d", c.MinCalls)
		case c.SamplingWindow < WindowBuckets*time.Millisecond:
			return bad("SamplingWindow must be at least %v, got %v", WindowBuckets*time.Millisecond, c.SamplingWindow)
		}
	case ModeCount:
		switch {
		case c.Threshold < 1:
			return bad("Threshold must be at least 1, got %d", c.Threshold)
		case c.Window <= 0:
			return bad("Window must be positive, got %v", c.Window)
		}
	default:
		return bad("Mode must be ratio or count, got %v", c.Mode)
	}
	switch {
	case c.OpenFor <= 0:
		return bad("OpenFor must be positive, got %v", c.OpenFor)
	case c.ProbeTimeout <= 0:
		return bad("ProbeTimeout must be positive, got %v", c.ProbeTimeout)
	case c.HalfOpenProbes < 1:
		return bad("HalfOpenProbes must be at least 1, got %d", c.HalfOpenProbes)
	case c.CloseAfter < 1:
		return bad("CloseAfter must be at least 1, got %d", c.CloseAfter)
	case c.Count&^AllKinds != 0:
		return bad("Count holds unknown failure kinds %#x", uint8(c.Count&^AllKinds))
	case c.Count == 0 && !c.OpenOnFatal:
		return bad("Count is empty and OpenOnFatal is false, so the breaker could never open; set Disabled instead")
	}
	return nil
}

// Counts reports whether a failure of kind k is evidence against the dependency under c: it
// counts toward FailureRatio or Threshold, reopens the breaker when a probe fails with it, or opens it under
// OpenOnFatal.
func (c Config) Counts(k FailureKind) bool { return c.counts(k) }

// counts reports whether a failure of kind k is evidence against the dependency under c.
func (c Config) counts(k FailureKind) bool {
	return c.Count.Has(k) || (k == Fatal && c.OpenOnFatal)
}

// Reason says why a transition happened.
type Reason int

const (
	// ReasonThreshold: CLOSED to OPEN, Threshold counted failures within Window.
	ReasonThreshold Reason = 1
	// ReasonFatal: CLOSED to OPEN at a Fatal failure under OpenOnFatal.
	ReasonFatal Reason = 2
	// ReasonOpenElapsed: OPEN to HALF_OPEN once OpenFor has passed.
	ReasonOpenElapsed Reason = 3
	// ReasonProbeFailed: HALF_OPEN to OPEN, a probe failed with a counted kind.
	ReasonProbeFailed Reason = 4
	// ReasonProbesSucceeded: HALF_OPEN to CLOSED after CloseAfter probe successes.
	ReasonProbesSucceeded Reason = 5
	// ReasonReset: an operator closed the breaker and cleared its failures.
	ReasonReset Reason = 6
	// ReasonForced: an operator put the breaker in a state.
	ReasonForced Reason = 7
	// ReasonRestored: a HALF_OPEN breaker restored at startup begins a new probe generation, so
	// that probes granted before the restart can never be confused with new ones.
	ReasonRestored Reason = 8
	// ReasonRatio: CLOSED to OPEN, the failure ratio over SamplingWindow reached FailureRatio
	// with at least MinCalls calls.
	ReasonRatio Reason = 9
)

var reasonNames = map[Reason]string{
	ReasonThreshold:       "threshold",
	ReasonFatal:           "fatal",
	ReasonOpenElapsed:     "open_elapsed",
	ReasonProbeFailed:     "probe_failed",
	ReasonProbesSucceeded: "probes_succeeded",
	ReasonReset:           "reset",
	ReasonForced:          "forced",
	ReasonRestored:        "restored",
	ReasonRatio:           "ratio",
}

func (r Reason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// edge is one legal transition. Operator reasons (reset, forced) are legal from every state and
// are checked separately.
type edge struct {
	from, to State
	reason   Reason
}

var automaticEdges = map[edge]bool{
	{StateClosed, StateOpen, ReasonThreshold}:           true,
	{StateClosed, StateOpen, ReasonRatio}:               true,
	{StateClosed, StateOpen, ReasonFatal}:               true,
	{StateOpen, StateHalfOpen, ReasonOpenElapsed}:       true,
	{StateHalfOpen, StateOpen, ReasonProbeFailed}:       true,
	{StateHalfOpen, StateClosed, ReasonProbesSucceeded}: true,
	{StateHalfOpen, StateHalfOpen, ReasonRestored}:      true,
}

// legal reports whether the state machine allows from -> to for reason.
func legal(from, to State, reason Reason) bool {
	if !from.Valid() || !to.Valid() {
		return false
	}
	switch reason {
	case ReasonReset:
		return to == StateClosed
	case ReasonForced:
		return true
	}
	return automaticEdges[edge{from, to, reason}]
}
