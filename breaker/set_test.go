package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const typ = "email.send"

type testBundle struct {
	clk *clock.Fake
	set *Set

	mu          sync.Mutex
	transitions []Transition
}

// setup returns a Set on a fake clock standing at t0 whose default config is def and which records
// every transition.
func setup(t *testing.T, def Config, perType map[string]Config) *testBundle {
	t.Helper()
	tb := &testBundle{clk: clock.NewFake(t0)}
	set, err := NewSet(tb.clk, def, perType, func(tr Transition) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		tb.transitions = append(tb.transitions, tr)
	})
	if err != nil {
		t.Fatalf("NewSet: %v", err)
	}
	tb.set = set
	return tb
}

// took returns the transitions recorded since the last call.
func (tb *testBundle) took() []Transition {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	out := tb.transitions
	tb.transitions = nil
	return out
}

// wantTransitions checks the transitions recorded since the last check, by from, to and reason.
func (tb *testBundle) wantTransitions(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for _, tr := range tb.took() {
		got = append(got, fmt.Sprintf("%v->%v %v", tr.From, tr.To, tr.Reason))
	}
	if !slices.Equal(got, want) {
		t.Errorf("transitions = %q, want %q", got, want)
	}
}

func (tb *testBundle) state(t *testing.T, jobType string) State {
	t.Helper()
	info, ok := tb.set.Info(jobType)
	if !ok {
		return StateClosed
	}
	return info.State
}

func (tb *testBundle) acquire(t *testing.T, jobType string) Permit {
	t.Helper()
	p, ok := tb.set.Acquire(jobType)
	if !ok {
		t.Fatalf("Acquire(%q) refused in state %v", jobType, tb.state(t, jobType))
	}
	return p
}

// fail reports n failures of kind, each on a fresh permit.
func (tb *testBundle) fail(t *testing.T, jobType string, n int, kind FailureKind) {
	t.Helper()
	for range n {
		tb.set.Failure(tb.acquire(t, jobType), kind)
	}
}

// open drives jobType's breaker to OPEN through failures and returns the time it opened.
func (tb *testBundle) open(t *testing.T, jobType string) time.Time {
	t.Helper()
	tb.fail(t, jobType, tb.set.ConfigFor(jobType).Threshold, Transient)
	if got := tb.state(t, jobType); got != StateOpen {
		t.Fatalf("state = %v after Threshold failures, want OPEN", got)
	}
	return tb.clk.Now()
}

// halfOpen drives jobType's breaker to HALF_OPEN.
func (tb *testBundle) halfOpen(t *testing.T, jobType string) {
	t.Helper()
	tb.open(t, jobType)
	tb.clk.Advance(tb.set.ConfigFor(jobType).OpenFor)
	if got := tb.set.Allowance(jobType); got != tb.set.ConfigFor(jobType).HalfOpenProbes {
		t.Fatalf("Allowance = %d after OpenFor, want HalfOpenProbes", got)
	}
	tb.took()
}

func TestNewSetRejectsInvalidConfig(t *testing.T) {
	t.Parallel()

	bad := CountConfig()
	bad.Window = 0
	clk := clock.NewFake(t0)

	if _, err := NewSet(clk, bad, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewSet with bad default: err = %v, want ErrInvalidConfig", err)
	}
	_, err := NewSet(clk, CountConfig(), map[string]Config{"pdf.render": bad}, nil)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"pdf.render"`) {
		t.Errorf("NewSet with bad per-type config: err = %v, want ErrInvalidConfig naming the type", err)
	}
	if _, err := NewSet(clk, CountConfig(), map[string]Config{"": CountConfig()}, nil); !errors.Is(err, ErrEmptyType) {
		t.Errorf("NewSet with empty type: err = %v, want ErrEmptyType", err)
	}
	if _, err := NewSet(nil, CountConfig(), nil, nil); err == nil {
		t.Error("NewSet with nil clock succeeded")
	}
}

func TestClosedOpensAtThreshold(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)

	if got := tb.set.Allowance(typ); got != Unlimited {
		t.Fatalf("Allowance of an unseen type = %d, want Unlimited", got)
	}
	tb.fail(t, typ, DefaultThreshold-1, Transient)
	if got := tb.set.Allowance(typ); got != Unlimited {
		t.Fatalf("Allowance after Threshold-1 failures = %d, want Unlimited", got)
	}
	info, _ := tb.set.Info(typ)
	if info.State != StateClosed || info.FailuresInWindow != DefaultThreshold-1 {
		t.Fatalf("Info = %+v, want CLOSED with %d failures", info, DefaultThreshold-1)
	}
	tb.wantTransitions(t)

	tb.fail(t, typ, 1, Transient)
	if got := tb.set.Allowance(typ); got != 0 {
		t.Errorf("Allowance when OPEN = %d, want 0", got)
	}
	if _, ok := tb.set.Acquire(typ); ok {
		t.Error("Acquire succeeded while OPEN")
	}
	info, _ = tb.set.Info(typ)
	if info.State != StateOpen || !info.OpenedAt.Equal(t0) || !info.NextProbeAt.Equal(t0.Add(DefaultOpenFor)) ||
		info.Generation != 2 || info.FailuresInWindow != DefaultThreshold {
		t.Errorf("Info = %+v, want OPEN at t0, next probe at t0+OpenFor, generation 2, %d failures", info, DefaultThreshold)
	}
	tb.wantTransitions(t, "CLOSED->OPEN threshold")

	// Other types are unaffected.
	if got := tb.set.Allowance("other"); got != Unlimited {
		t.Errorf("Allowance of another type = %d, want Unlimited", got)
	}
}

func TestSuccessWhileClosedDoesNotClearFailures(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)

	tb.fail(t, typ, DefaultThreshold-1, Transient)
	tb.set.Success(tb.acquire(t, typ))
	tb.fail(t, typ, 1, Timeout)
	if got := tb.state(t, typ); got != StateOpen {
		t.Errorf("state = %v, want OPEN: successes in between must not reset the window", got)
	}
}

func TestWindowEdges(t *testing.T) {
	t.Parallel()

	cfg := CountConfig()
	cfg.Threshold = 3
	cfg.Window = time.Minute

	tests := []struct {
		name string
		gaps []time.Duration // clock advance before each failure
		want State
	}{
		{name: "all at once", gaps: []time.Duration{0, 0, 0}, want: StateOpen},
		{name: "spread inside the window", gaps: []time.Duration{0, 30 * time.Second, 30*time.Second - time.Nanosecond}, want: StateOpen},
		{name: "first exactly at the window edge falls out", gaps: []time.Duration{0, 30 * time.Second, 30 * time.Second}, want: StateClosed},
		{name: "first just past the edge", gaps: []time.Duration{0, time.Minute, 0}, want: StateClosed},
		{name: "old failure out, three new in", gaps: []time.Duration{0, time.Minute, 0, 0}, want: StateOpen},
		{name: "too slow forever", gaps: []time.Duration{0, 40 * time.Second, 40 * time.Second, 40 * time.Second, 40 * time.Second}, want: StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, cfg, nil)
			for _, gap := range tt.gaps {
				tb.clk.Advance(gap)
				tb.fail(t, typ, 1, Transient)
			}
			if got := tb.state(t, typ); got != tt.want {
				t.Errorf("state = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFailuresInWindowAgeOut(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)

	tb.fail(t, typ, 2, Transient)
	tb.clk.Advance(DefaultWindow - time.Nanosecond)
	if info, _ := tb.set.Info(typ); info.FailuresInWindow != 2 {
		t.Errorf("FailuresInWindow just inside the window = %d, want 2", info.FailuresInWindow)
	}
	tb.clk.Advance(time.Nanosecond)
	if info, _ := tb.set.Info(typ); info.FailuresInWindow != 0 {
		t.Errorf("FailuresInWindow at the window edge = %d, want 0", info.FailuresInWindow)
	}
}

func TestWhichKindsCount(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		count       Kinds
		openOnFatal bool
		kind        FailureKind
		wantOpen    bool
	}{
		{"all counts transient", AllKinds, false, Transient, true},
		{"all counts fatal", AllKinds, false, Fatal, true},
		{"all counts lease expired", AllKinds, false, LeaseExpired, true},
		{"all counts timeout", AllKinds, false, Timeout, true},
		{"transient only ignores fatal", KindsOf(Transient), false, Fatal, false},
		{"transient only ignores lease expired", KindsOf(Transient), false, LeaseExpired, false},
		{"transient only ignores timeout", KindsOf(Transient), false, Timeout, false},
		{"timeouts only", KindsOf(Timeout, LeaseExpired), false, Timeout, true},
		{"timeouts only ignores transient", KindsOf(Timeout, LeaseExpired), false, Transient, false},
		{"unknown kind never counts", AllKinds, false, FailureKind(0x40), false},
		{"zero kind never counts", AllKinds, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := CountConfig()
			cfg.Threshold = 2
			cfg.Count = tt.count
			cfg.OpenOnFatal = tt.openOnFatal
			tb := setup(t, cfg, nil)
			tb.fail(t, typ, 2, tt.kind)
			if got := tb.state(t, typ) == StateOpen; got != tt.wantOpen {
				t.Errorf("open = %v after 2 %v failures, want %v", got, tt.kind, tt.wantOpen)
			}
		})
	}
}

func TestOpenOnFatal(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		count       Kinds
		openOnFatal bool
		wantState   State
		wantReason  string
	}{
		{"opens at once", AllKinds, true, StateOpen, "CLOSED->OPEN fatal"},
		{"opens at once even when fatal is not counted", KindsOf(Transient), true, StateOpen, "CLOSED->OPEN fatal"},
		{"only counts without the flag", AllKinds, false, StateClosed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := CountConfig()
			cfg.Count = tt.count
			cfg.OpenOnFatal = tt.openOnFatal
			tb := setup(t, cfg, nil)
			tb.fail(t, typ, 1, Fatal)
			if got := tb.state(t, typ); got != tt.wantState {
				t.Errorf("state = %v, want %v", got, tt.wantState)
			}
			if tt.wantReason == "" {
				tb.wantTransitions(t)
			} else {
				tb.wantTransitions(t, tt.wantReason)
			}
		})
	}
}

func TestOpenTurnsHalfOpenAfterOpenFor(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)
	openedAt := tb.open(t, typ)
	tb.took()

	at, ok := tb.set.NextChange()
	if !ok || !at.Equal(openedAt.Add(DefaultOpenFor)) {
		t.Fatalf("NextChange = %v, %v; want opened at + OpenFor", at, ok)
	}
	tb.clk.Advance(DefaultOpenFor - time.Nanosecond)
	if got := tb.set.Allowance(typ); got != 0 {
		t.Fatalf("Allowance just before OpenFor = %d, want 0", got)
	}
	tb.wantTransitions(t)

	tb.clk.Advance(time.Nanosecond)
	if got := tb.set.Allowance(typ); got != 1 {
		t.Fatalf("Allowance at OpenFor = %d, want 1 probe", got)
	}
	tb.wantTransitions(t, "OPEN->HALF_OPEN open_elapsed")
	info, _ := tb.set.Info(typ)
	if info.State != StateHalfOpen || info.Generation != 3 || !info.OpenedAt.Equal(openedAt) || !info.NextProbeAt.Equal(tb.clk.Now()) {
		t.Errorf("Info = %+v, want HALF_OPEN, generation 3, opened at %v, next probe now", info, openedAt)
	}
	// Asking again does not transition again.
	tb.set.Allowance(typ)
	tb.set.List()
	tb.wantTransitions(t)
}

func TestNextChange(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.HalfOpenProbes = 2
	cfg.ProbeTimeout = 10 * time.Second
	tb := setup(t, cfg, map[string]Config{"disabled": {Disabled: true}})

	if at, ok := tb.set.NextChange(); ok {
		t.Fatalf("NextChange with nothing pending = %v, true", at)
	}
	tb.halfOpen(t, typ)
	if at, ok := tb.set.NextChange(); ok {
		t.Fatalf("NextChange HALF_OPEN without probes = %v, true", at)
	}
	start := tb.clk.Now()
	tb.acquire(t, typ)
	tb.clk.Advance(3 * time.Second)
	tb.acquire(t, typ)
	at, ok := tb.set.NextChange()
	if !ok || !at.Equal(start.Add(10*time.Second)) {
		t.Fatalf("NextChange = %v, %v; want first probe's timeout", at, ok)
	}

	// Open a second type later; the earliest change wins.
	tb.open(t, "other")
	at, ok = tb.set.NextChange()
	if !ok || !at.Equal(start.Add(10*time.Second)) {
		t.Fatalf("NextChange = %v, %v; want first probe's timeout", at, ok)
	}

	// At the due time NextChange applies the change and returns a later time.
	tb.clk.Advance(7 * time.Second)
	at, ok = tb.set.NextChange()
	if !ok || !at.Equal(start.Add(13*time.Second)) {
		t.Fatalf("NextChange at the first timeout = %v, %v; want the second probe's timeout", at, ok)
	}
	if !at.After(tb.clk.Now()) {
		t.Errorf("NextChange returned %v, not after now %v", at, tb.clk.Now())
	}
	tb.clk.Advance(3 * time.Second)
	at, ok = tb.set.NextChange()
	if !ok || !at.Equal(start.Add(3*time.Second+DefaultOpenFor)) {
		t.Errorf("NextChange = %v, %v; want the other type's OpenFor end", at, ok)
	}
}

func TestHalfOpenProbeLimit(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.HalfOpenProbes = 3
	cfg.CloseAfter = 3
	tb := setup(t, cfg, nil)
	tb.halfOpen(t, typ)

	var probes []Permit
	for i := range 3 {
		if got := tb.set.Allowance(typ); got != 3-i {
			t.Fatalf("Allowance with %d probes in flight = %d, want %d", i, got, 3-i)
		}
		p := tb.acquire(t, typ)
		if !p.IsProbe() {
			t.Fatalf("permit %+v granted while HALF_OPEN is not a probe", p)
		}
		probes = append(probes, p)
	}
	if got := tb.set.Allowance(typ); got != 0 {
		t.Errorf("Allowance with every slot taken = %d, want 0", got)
	}
	if _, ok := tb.set.Acquire(typ); ok {
		t.Error("Acquire succeeded with every probe slot taken")
	}
	info, _ := tb.set.Info(typ)
	if info.ProbesInFlight != 3 || !info.NextProbeAt.Equal(tb.clk.Now().Add(cfg.ProbeTimeout)) {
		t.Errorf("Info = %+v, want 3 probes in flight and next probe at the first probe's timeout", info)
	}
	tb.set.Success(probes[0])
	if got := tb.set.Allowance(typ); got != 1 {
		t.Errorf("Allowance after one probe succeeded = %d, want 1", got)
	}
}

func TestCloseAfterSuccesses(t *testing.T) {
	t.Parallel()

	for _, closeAfter := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(closeAfter), func(t *testing.T) {
			t.Parallel()
			cfg := CountConfig()
			cfg.CloseAfter = closeAfter
			tb := setup(t, cfg, nil)
			tb.halfOpen(t, typ)

			for i := 1; i < closeAfter; i++ {
				tb.set.Success(tb.acquire(t, typ))
				info, _ := tb.set.Info(typ)
				if info.State != StateHalfOpen || info.ProbeSuccesses != i {
					t.Fatalf("after %d successes Info = %+v, want HALF_OPEN with %d successes", i, info, i)
				}
			}
			tb.set.Success(tb.acquire(t, typ))
			info, _ := tb.set.Info(typ)
			if info.State != StateClosed || info.FailuresInWindow != 0 || !info.OpenedAt.IsZero() || info.ProbeSuccesses != 0 {
				t.Errorf("Info = %+v, want CLOSED with failures and opened at cleared", info)
			}
			if got := tb.set.Allowance(typ); got != Unlimited {
				t.Errorf("Allowance = %d, want Unlimited", got)
			}
			tb.wantTransitions(t, "HALF_OPEN->CLOSED probes_succeeded")
		})
	}
}

func TestProbeFailureReopens(t *testing.T) {
	t.Parallel()

	for _, kind := range []FailureKind{Transient, Fatal, LeaseExpired, Timeout} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			cfg := CountConfig()
			cfg.CloseAfter = 2
			tb := setup(t, cfg, nil)
			tb.halfOpen(t, typ)

			tb.set.Success(tb.acquire(t, typ))
			tb.clk.Advance(time.Second)
			tb.set.Failure(tb.acquire(t, typ), kind)
			info, _ := tb.set.Info(typ)
			if info.State != StateOpen || !info.OpenedAt.Equal(tb.clk.Now()) || info.ProbeSuccesses != 0 {
				t.Errorf("Info = %+v, want OPEN since now with successes cleared", info)
			}
			tb.wantTransitions(t, "HALF_OPEN->OPEN probe_failed")
			// The new OPEN period lasts OpenFor from the reopening.
			tb.clk.Advance(cfg.OpenFor - time.Nanosecond)
			if got := tb.set.Allowance(typ); got != 0 {
				t.Errorf("Allowance before the new OpenFor ends = %d, want 0", got)
			}
		})
	}
}

func TestUncountedProbeFailureIsNeutral(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.Count = KindsOf(Transient, Timeout)
	tb := setup(t, cfg, nil)
	tb.halfOpen(t, typ)

	tb.set.Failure(tb.acquire(t, typ), Fatal)
	if got := tb.state(t, typ); got != StateHalfOpen {
		t.Fatalf("state = %v after an uncounted probe failure, want HALF_OPEN", got)
	}
	if got := tb.set.Allowance(typ); got != 1 {
		t.Errorf("Allowance = %d, want the slot back", got)
	}
	tb.wantTransitions(t)
}

func TestProbeTimeoutFreesSlot(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.ProbeTimeout = 20 * time.Second
	tb := setup(t, cfg, nil)
	tb.halfOpen(t, typ)

	lost := tb.acquire(t, typ)
	tb.clk.Advance(cfg.ProbeTimeout - time.Nanosecond)
	if got := tb.set.Allowance(typ); got != 0 {
		t.Fatalf("Allowance before the probe timeout = %d, want 0", got)
	}
	tb.clk.Advance(time.Nanosecond)
	if got := tb.set.Allowance(typ); got != 1 {
		t.Fatalf("Allowance at the probe timeout = %d, want 1", got)
	}
	tb.wantTransitions(t)

	// The lost probe reporting late neither closes nor reopens the breaker, nor frees the slot of
	// the probe that replaced it.
	next := tb.acquire(t, typ)
	tb.set.Success(lost)
	tb.set.Failure(lost, Transient)
	tb.set.Release(lost)
	info, _ := tb.set.Info(typ)
	if info.State != StateHalfOpen || info.ProbesInFlight != 1 || info.ProbeSuccesses != 0 {
		t.Errorf("Info = %+v, want HALF_OPEN with the replacement probe in flight and no success", info)
	}
	tb.set.Success(next)
	if got := tb.state(t, typ); got != StateClosed {
		t.Errorf("state = %v after the replacement probe succeeded, want CLOSED", got)
	}
}

func TestStaleResultsIgnored(t *testing.T) {
	t.Parallel()

	cfg := CountConfig()
	cfg.Threshold = 2
	cfg.HalfOpenProbes = 2
	cfg.CloseAfter = 1

	tests := []struct {
		name string
		// run returns the stale permit and leaves the breaker in the state to check.
		run    func(t *testing.T, tb *testBundle) Permit
		report func(s *Set, p Permit)
	}{
		{
			name: "closed permit failing after the breaker opened",
			run: func(t *testing.T, tb *testBundle) Permit {
				p := tb.acquire(t, typ)
				tb.open(t, typ)
				return p
			},
			report: func(s *Set, p Permit) { s.Failure(p, Transient) },
		},
		{
			name: "closed permit failing after a full cycle back to closed",
			run: func(t *testing.T, tb *testBundle) Permit {
				p := tb.acquire(t, typ)
				tb.halfOpen(t, typ)
				tb.set.Success(tb.acquire(t, typ))
				tb.fail(t, typ, 1, Transient)
				return p
			},
			report: func(s *Set, p Permit) { s.Failure(p, Transient) },
		},
		{
			name: "probe succeeding after another probe reopened the breaker",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.halfOpen(t, typ)
				p := tb.acquire(t, typ)
				tb.set.Failure(tb.acquire(t, typ), Transient)
				tb.clk.Advance(cfg.OpenFor)
				tb.set.Allowance(typ) // HALF_OPEN again, new generation
				return p
			},
			report: func(s *Set, p Permit) { s.Success(p) },
		},
		{
			name: "probe failing after another probe closed the breaker",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.halfOpen(t, typ)
				p := tb.acquire(t, typ)
				tb.set.Success(tb.acquire(t, typ))
				return p
			},
			report: func(s *Set, p Permit) { s.Failure(p, Fatal) },
		},
		{
			name: "probe from before a reset",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.halfOpen(t, typ)
				p := tb.acquire(t, typ)
				if _, err := tb.set.Force(typ, StateHalfOpen); err != nil {
					t.Fatal(err)
				}
				return p
			},
			report: func(s *Set, p Permit) { s.Success(p) },
		},
		{
			name: "untracked permit of generation 0",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.fail(t, typ, 1, Transient)
				return Permit{Type: typ}
			},
			report: func(s *Set, p Permit) { s.Failure(p, Transient) },
		},
		{
			name: "zero permit",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.fail(t, typ, 1, Transient)
				return Permit{}
			},
			report: func(s *Set, p Permit) { s.Failure(p, Transient) },
		},
		{
			name: "permit of a future generation",
			run: func(t *testing.T, tb *testBundle) Permit {
				tb.fail(t, typ, 1, Transient)
				return Permit{Type: typ, Generation: 99}
			},
			report: func(s *Set, p Permit) { s.Failure(p, Transient) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, cfg, nil)
			p := tt.run(t, tb)
			before, _ := tb.set.Info(typ)
			tb.took()
			tt.report(tb.set, p)
			after, _ := tb.set.Info(typ)
			if after != before {
				t.Errorf("a stale result changed the breaker:\nbefore %+v\nafter  %+v", before, after)
			}
			tb.wantTransitions(t)
		})
	}
}

func TestReleaseKeepsSlotsFree(t *testing.T) {
	t.Parallel()

	cfg := CountConfig()
	cfg.HalfOpenProbes = 2
	cfg.CloseAfter = 1

	t.Run("release frees a probe slot and counts nothing", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, cfg, nil)
		tb.halfOpen(t, typ)
		for range 10 {
			a, b := tb.acquire(t, typ), tb.acquire(t, typ)
			if got := tb.set.Allowance(typ); got != 0 {
				t.Fatalf("Allowance with both slots taken = %d", got)
			}
			tb.set.Release(a)
			tb.set.Release(b)
		}
		info, _ := tb.set.Info(typ)
		if info.State != StateHalfOpen || info.ProbesInFlight != 0 || info.ProbeSuccesses != 0 {
			t.Errorf("Info = %+v, want HALF_OPEN, no probes in flight, no successes", info)
		}
		tb.wantTransitions(t)
	})

	t.Run("double release frees one slot only", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, cfg, nil)
		tb.halfOpen(t, typ)
		a, _ := tb.acquire(t, typ), tb.acquire(t, typ)
		tb.set.Release(a)
		tb.set.Release(a)
		if got := tb.set.Allowance(typ); got != 1 {
			t.Errorf("Allowance = %d, want 1: the other probe still holds its slot", got)
		}
	})

	t.Run("result after release is ignored", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, cfg, nil)
		tb.halfOpen(t, typ)
		a := tb.acquire(t, typ)
		tb.set.Release(a)
		tb.set.Success(a)
		tb.set.Failure(a, Transient)
		if info, _ := tb.set.Info(typ); info.State != StateHalfOpen || info.ProbeSuccesses != 0 {
			t.Errorf("Info = %+v, want HALF_OPEN without successes", info)
		}
	})

	t.Run("release while closed never counts as failure or success", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, cfg, nil)
		for range 3 * cfg.Threshold {
			tb.set.Release(tb.acquire(t, typ))
		}
		tb.fail(t, typ, cfg.Threshold-1, Transient)
		if info, _ := tb.set.Info(typ); info.State != StateClosed || info.FailuresInWindow != cfg.Threshold-1 {
			t.Errorf("Info = %+v, want CLOSED with Threshold-1 failures", info)
		}
	})
}

func TestReleaseAfterReopenKeepsNewSlots(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.HalfOpenProbes = 1
	tb := setup(t, cfg, nil)
	tb.halfOpen(t, typ)

	old := tb.acquire(t, typ)
	if _, err := tb.set.Force(typ, StateHalfOpen); err != nil {
		t.Fatal(err)
	}
	fresh := tb.acquire(t, typ)
	if old.Probe != fresh.Probe || old.Generation == fresh.Generation {
		t.Fatalf("permits %+v and %+v: want the same probe number in different generations", old, fresh)
	}
	tb.set.Release(old)
	if got := tb.set.Allowance(typ); got != 0 {
		t.Errorf("Allowance = %d after releasing a stale probe, want 0: the fresh probe holds the slot", got)
	}
	tb.set.Release(fresh)
	if got := tb.set.Allowance(typ); got != 1 {
		t.Errorf("Allowance = %d after releasing the fresh probe, want 1", got)
	}
}

func TestResetAndForce(t *testing.T) {
	t.Parallel()

	t.Run("reset closes and forgets failures", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), nil)
		tb.open(t, typ)
		tb.took()
		info, err := tb.set.Reset(typ)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != StateClosed || info.FailuresInWindow != 0 || !info.OpenedAt.IsZero() || info.Generation != 3 {
			t.Errorf("Reset returned %+v, want CLOSED, no failures, generation 3", info)
		}
		tb.wantTransitions(t, "OPEN->CLOSED reset")
		tb.fail(t, typ, DefaultThreshold-1, Transient)
		if got := tb.state(t, typ); got != StateClosed {
			t.Errorf("state = %v, want CLOSED: old failures were forgotten", got)
		}
	})

	t.Run("reset of a closed breaker clears failures", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), nil)
		tb.fail(t, typ, 3, Transient)
		if _, err := tb.set.Reset(typ); err != nil {
			t.Fatal(err)
		}
		tb.wantTransitions(t, "CLOSED->CLOSED reset")
		if info, _ := tb.set.Info(typ); info.FailuresInWindow != 0 {
			t.Errorf("FailuresInWindow = %d, want 0", info.FailuresInWindow)
		}
	})

	forceTests := []struct {
		to            State
		wantAllowance int
	}{
		{StateOpen, 0},
		{StateHalfOpen, DefaultHalfOpenProbes},
		{StateClosed, Unlimited},
	}
	for _, from := range []State{StateClosed, StateOpen, StateHalfOpen} {
		for _, tt := range forceTests {
			t.Run(fmt.Sprintf("force %v to %v", from, tt.to), func(t *testing.T) {
				t.Parallel()
				tb := setup(t, CountConfig(), nil)
				tb.fail(t, typ, 2, Transient)
				if from != StateClosed {
					if _, err := tb.set.Force(typ, from); err != nil {
						t.Fatal(err)
					}
				}
				tb.took()
				tb.clk.Advance(time.Second)
				info, err := tb.set.Force(typ, tt.to)
				if err != nil {
					t.Fatal(err)
				}
				if info.State != tt.to {
					t.Errorf("Force returned state %v, want %v", info.State, tt.to)
				}
				if tt.to == StateOpen && !info.OpenedAt.Equal(tb.clk.Now()) {
					t.Errorf("OpenedAt = %v, want now: forcing OPEN restarts the wait", info.OpenedAt)
				}
				if tt.to == StateClosed && info.FailuresInWindow != 0 {
					t.Errorf("FailuresInWindow = %d after forcing CLOSED, want 0", info.FailuresInWindow)
				}
				if got := tb.set.Allowance(typ); got != tt.wantAllowance {
					t.Errorf("Allowance = %d, want %d", got, tt.wantAllowance)
				}
				tb.wantTransitions(t, fmt.Sprintf("%v->%v forced", from, tt.to))
			})
		}
	}

	t.Run("force creates a breaker for an unseen type", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), nil)
		if _, err := tb.set.Force("new.type", StateOpen); err != nil {
			t.Fatal(err)
		}
		if _, ok := tb.set.Acquire("new.type"); ok {
			t.Error("Acquire succeeded on a type forced OPEN")
		}
	})

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), map[string]Config{"off": {Disabled: true}})
		if _, err := tb.set.Force(typ, State(0)); !errors.Is(err, ErrInvalidState) {
			t.Errorf("Force(State(0)) err = %v, want ErrInvalidState", err)
		}
		if _, err := tb.set.Force("off", StateOpen); !errors.Is(err, ErrDisabled) {
			t.Errorf("Force of a disabled type err = %v, want ErrDisabled", err)
		}
		if _, err := tb.set.Reset("off"); !errors.Is(err, ErrDisabled) {
			t.Errorf("Reset of a disabled type err = %v, want ErrDisabled", err)
		}
		if _, err := tb.set.Reset(""); !errors.Is(err, ErrEmptyType) {
			t.Errorf("Reset(\"\") err = %v, want ErrEmptyType", err)
		}
		tb.wantTransitions(t)
	})
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), map[string]Config{"off": {Disabled: true}})

	for range 20 {
		p := tb.acquire(t, "off")
		if p.Generation != 0 {
			t.Fatalf("permit %+v of a disabled breaker is tracked", p)
		}
		tb.set.Failure(p, Fatal)
	}
	if got := tb.set.Allowance("off"); got != Unlimited {
		t.Errorf("Allowance = %d, want Unlimited", got)
	}
	info, ok := tb.set.Info("off")
	if !ok || !info.Disabled || info.State != StateClosed || info.FailuresInWindow != 0 {
		t.Errorf("Info = %+v, %v; want a disabled CLOSED breaker without failures", info, ok)
	}
	if snap := tb.set.Snapshot(); len(snap) != 0 {
		t.Errorf("Snapshot = %+v, want disabled breakers left out", snap)
	}
	tb.wantTransitions(t)
}

func TestListAndInfo(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), map[string]Config{"b.configured": CountConfig()})

	if _, ok := tb.set.Info("never.seen"); ok {
		t.Error("Info of an unseen type reported ok")
	}
	if _, ok := tb.set.Info("b.configured"); !ok {
		t.Error("Info of a configured type before its first job reported !ok")
	}
	tb.open(t, "c.open")
	tb.acquire(t, "a.closed")

	var got []string
	for _, i := range tb.set.List() {
		got = append(got, i.Type+"="+i.State.String())
	}
	want := []string{"a.closed=CLOSED", "b.configured=CLOSED", "c.open=OPEN"}
	if !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
}

func TestSnapshotRestore(t *testing.T) {
	t.Parallel()

	t.Run("open stays open until OpenFor after the original opening", func(t *testing.T) {
		t.Parallel()
		before := setup(t, CountConfig(), nil)
		openedAt := before.open(t, typ)
		before.clk.Advance(10 * time.Second)
		saved := before.set.Snapshot()

		after := setup(t, CountConfig(), nil)
		after.clk.Advance(10 * time.Second)
		if err := after.set.Restore(saved); err != nil {
			t.Fatal(err)
		}
		if got := after.set.Snapshot(); !savedEqual(got, saved) {
			t.Errorf("round trip: Snapshot = %+v, want %+v", got, saved)
		}
		after.wantTransitions(t)
		if _, ok := after.set.Acquire(typ); ok {
			t.Fatal("Acquire succeeded on a restored OPEN breaker")
		}
		info, _ := after.set.Info(typ)
		if !info.OpenedAt.Equal(openedAt) || !info.NextProbeAt.Equal(openedAt.Add(DefaultOpenFor)) {
			t.Errorf("Info = %+v, want opened at %v", info, openedAt)
		}
		after.clk.Advance(DefaultOpenFor - 10*time.Second - time.Nanosecond)
		if got := after.set.Allowance(typ); got != 0 {
			t.Errorf("Allowance just before OpenFor = %d, want 0", got)
		}
		after.clk.Advance(time.Nanosecond)
		if got := after.set.Allowance(typ); got != 1 {
			t.Errorf("Allowance at OpenFor = %d, want 1", got)
		}
		after.wantTransitions(t, "OPEN->HALF_OPEN open_elapsed")
	})

	t.Run("closed keeps its failures in the window", func(t *testing.T) {
		t.Parallel()
		before := setup(t, CountConfig(), nil)
		before.fail(t, typ, 2, Transient)
		before.clk.Advance(30 * time.Second)
		before.fail(t, typ, 2, Transient)
		saved := before.set.Snapshot()
		if len(saved) != 1 || len(saved[0].Failures) != 4 || saved[0].State != StateClosed {
			t.Fatalf("Snapshot = %+v, want one CLOSED breaker with 4 failures", saved)
		}
		// The returned failures are a copy.
		saved[0].Failures[0] = time.Time{}
		if again := before.set.Snapshot(); again[0].Failures[0].IsZero() {
			t.Error("Snapshot shares its failure slice with the breaker")
		}
		saved = before.set.Snapshot()

		after := setup(t, CountConfig(), nil)
		after.clk.Advance(70 * time.Second) // the first two failures are now out of the window
		if err := after.set.Restore(saved); err != nil {
			t.Fatal(err)
		}
		if info, _ := after.set.Info(typ); info.FailuresInWindow != 2 {
			t.Errorf("FailuresInWindow = %d, want 2", info.FailuresInWindow)
		}
		after.fail(t, typ, 2, Transient)
		if got := after.state(t, typ); got != StateClosed {
			t.Fatalf("state = %v with 4 failures in window, want CLOSED", got)
		}
		after.fail(t, typ, 1, Transient)
		if got := after.state(t, typ); got != StateOpen {
			t.Errorf("state = %v with 5 failures in window, want OPEN", got)
		}
	})

	t.Run("half open starts a new probe generation", func(t *testing.T) {
		t.Parallel()
		cfg := CountConfig()
		cfg.CloseAfter = 2
		before := setup(t, cfg, nil)
		before.halfOpen(t, typ)
		before.set.Success(before.acquire(t, typ))
		lost := before.acquire(t, typ)
		saved := before.set.Snapshot()

		after := setup(t, cfg, nil)
		if err := after.set.Restore(saved); err != nil {
			t.Fatal(err)
		}
		trs := after.took()
		if len(trs) != 1 || trs[0].Reason != ReasonRestored || trs[0].Generation != saved[0].Generation+1 {
			t.Fatalf("transitions = %+v, want one restored transition to generation %d", trs, saved[0].Generation+1)
		}
		info, _ := after.set.Info(typ)
		if info.State != StateHalfOpen || info.ProbesInFlight != 0 || info.ProbeSuccesses != 1 {
			t.Fatalf("Info = %+v, want HALF_OPEN, no probes, 1 success kept", info)
		}
		after.set.Failure(lost, Transient) // from before the restart: stale
		if got := after.state(t, typ); got != StateHalfOpen {
			t.Fatalf("state = %v after a pre-restart probe failed, want HALF_OPEN", got)
		}
		after.set.Success(after.acquire(t, typ))
		if got := after.state(t, typ); got != StateClosed {
			t.Errorf("state = %v, want CLOSED after the second success in a row", got)
		}
	})

	t.Run("invalid records restore nothing", func(t *testing.T) {
		t.Parallel()
		good := Saved{Type: "good", State: StateOpen, OpenedAt: t0, Generation: 2}
		tests := []struct {
			name string
			bad  Saved
			want string
		}{
			{"empty type", Saved{State: StateClosed, Generation: 1}, "Type is empty"},
			{"duplicate", good, "twice"},
			{"bad state", Saved{Type: "x", State: 7, Generation: 1}, "State"},
			{"generation zero", Saved{Type: "x", State: StateClosed}, "Generation"},
			{"open without opened at", Saved{Type: "x", State: StateOpen, Generation: 2}, "OpenedAt"},
			{"negative successes", Saved{Type: "x", State: StateHalfOpen, Generation: 3, ProbeSuccesses: -1}, "ProbeSuccesses"},
		}
		for _, tt := range tests {
			tb := setup(t, CountConfig(), nil)
			err := tb.set.Restore([]Saved{good, tt.bad})
			if !errors.Is(err, ErrInvalidSaved) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: Restore err = %v, want ErrInvalidSaved mentioning %q", tt.name, err, tt.want)
			}
			if _, ok := tb.set.Info("good"); ok {
				t.Errorf("%s: a valid record was restored alongside an invalid one", tt.name)
			}
		}
	})

	t.Run("opened at in the future is clamped to now", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), nil)
		err := tb.set.Restore([]Saved{{Type: typ, State: StateOpen, OpenedAt: t0.Add(24 * time.Hour), Generation: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if info, _ := tb.set.Info(typ); info.State != StateOpen || !info.OpenedAt.Equal(t0) {
			t.Errorf("Info = %+v, want OPEN since now", info)
		}
		tb.clk.Advance(DefaultOpenFor)
		if got := tb.set.Allowance(typ); got != 1 {
			t.Errorf("Allowance after OpenFor = %d, want 1", got)
		}
	})

	t.Run("records of disabled types are skipped", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, CountConfig(), map[string]Config{"off": {Disabled: true}})
		err := tb.set.Restore([]Saved{{Type: "off", State: StateOpen, OpenedAt: t0, Generation: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if got := tb.set.Allowance("off"); got != Unlimited {
			t.Errorf("Allowance = %d, want Unlimited", got)
		}
	})
}

func savedEqual(a, b []Saved) bool {
	return slices.EqualFunc(a, b, func(x, y Saved) bool {
		return x.Type == y.Type && x.State == y.State && x.OpenedAt.Equal(y.OpenedAt) &&
			x.Generation == y.Generation && x.ProbeSuccesses == y.ProbeSuccesses &&
			slices.EqualFunc(x.Failures, y.Failures, time.Time.Equal)
	})
}

func TestTransitionCallback(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.Threshold = 2
	tb := setup(t, cfg, nil)

	tb.fail(t, typ, 2, Transient)                 // CLOSED -> OPEN
	tb.clk.Advance(cfg.OpenFor)                   //
	tb.set.Allowance(typ)                         // OPEN -> HALF_OPEN
	tb.set.Allowance(typ)                         // no change
	tb.set.Failure(tb.acquire(t, typ), Transient) // HALF_OPEN -> OPEN
	tb.clk.Advance(cfg.OpenFor)                   //
	tb.set.Success(tb.acquire(t, typ))            // OPEN -> HALF_OPEN -> CLOSED
	if _, err := tb.set.Reset(typ); err != nil {  // CLOSED -> CLOSED
		t.Fatal(err)
	}

	trs := tb.took()
	if len(trs) > 0 && !trs[0].At.Equal(t0) {
		t.Errorf("first transition at %v, want %v", trs[0].At, t0)
	}
	want := []struct {
		from, to State
		reason   Reason
	}{
		{StateClosed, StateOpen, ReasonThreshold},
		{StateOpen, StateHalfOpen, ReasonOpenElapsed},
		{StateHalfOpen, StateOpen, ReasonProbeFailed},
		{StateOpen, StateHalfOpen, ReasonOpenElapsed},
		{StateHalfOpen, StateClosed, ReasonProbesSucceeded},
		{StateClosed, StateClosed, ReasonReset},
	}
	if len(trs) != len(want) {
		t.Fatalf("got %d transitions %+v, want %d", len(trs), trs, len(want))
	}
	for i, tr := range trs {
		w := want[i]
		if tr.Type != typ || tr.From != w.from || tr.To != w.to || tr.Reason != w.reason {
			t.Errorf("transition %d = %v %v->%v %v, want %v->%v %v", i, tr.Type, tr.From, tr.To, tr.Reason, w.from, w.to, w.reason)
		}
		if tr.Generation != int64(i+2) || tr.Saved.Generation != tr.Generation || tr.Saved.State != tr.To || tr.Saved.Type != typ {
			t.Errorf("transition %d: generation %d, saved %+v; want generation %d and matching saved state", i, tr.Generation, tr.Saved, i+2)
		}
	}
}

func TestTransitionCallbackMayCallBack(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	cfg := CountConfig()
	cfg.Threshold = 1
	var set *Set
	var seen []string
	set, err := NewSet(clk, cfg, nil, func(tr Transition) {
		// Reading, and even transitioning, from inside the callback must not deadlock; the nested
		// transition is delivered after this call returns.
		info, _ := set.Info(tr.Type)
		seen = append(seen, fmt.Sprintf("%v->%v (now %v)", tr.From, tr.To, info.State))
		if tr.To == StateOpen {
			if _, err := set.Reset(tr.Type); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Acquire(typ)
	set.Failure(p, Transient)
	want := []string{"CLOSED->OPEN (now OPEN)", "OPEN->CLOSED (now CLOSED)"}
	if !slices.Equal(seen, want) {
		t.Errorf("callbacks = %q, want %q", seen, want)
	}
}

func TestTransitionCallbackPanicDoesNotWedge(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	cfg := CountConfig()
	cfg.Threshold = 1
	calls := 0
	set, err := NewSet(clk, cfg, nil, func(Transition) {
		calls++
		if calls == 1 {
			panic("boom")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		p, _ := set.Acquire(typ)
		set.Failure(p, Transient)
	}()
	if _, err := set.Reset(typ); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("callback called %d times, want 2: a panic must not stop later deliveries", calls)
	}
}

// TestConcurrent hammers one Set from many goroutines while the clock moves, and checks that the
// transitions form a legal chain and that HALF_OPEN never has more probes in flight than allowed.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.Threshold = 3
	cfg.HalfOpenProbes = 2
	cfg.CloseAfter = 2
	cfg.OpenFor = 50 * time.Millisecond
	cfg.ProbeTimeout = 80 * time.Millisecond
	cfg.Window = 100 * time.Millisecond
	clk := clock.NewFake(t0)
	types := []string{"a", "b", "c"}

	var mu sync.Mutex
	last := map[string]Transition{}
	var problems []string
	set, err := NewSet(clk, cfg, nil, func(tr Transition) {
		mu.Lock()
		defer mu.Unlock()
		prev, ok := last[tr.Type]
		from, gen := StateClosed, int64(1)
		if ok {
			from, gen = prev.To, prev.Generation
		}
		if tr.From != from || tr.Generation != gen+1 || !legal(tr.From, tr.To, tr.Reason) {
			problems = append(problems, fmt.Sprintf("%s: %v->%v gen %d after %v gen %d", tr.Type, tr.From, tr.To, tr.Generation, from, gen))
		}
		last[tr.Type] = tr
	})
	if err != nil {
		t.Fatal(err)
	}

	const workers, rounds = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Millisecond)
				set.NextChange()
				for _, ty := range types {
					if info, _ := set.Info(ty); info.ProbesInFlight > cfg.HalfOpenProbes {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("%s: %d probes in flight", ty, info.ProbesInFlight))
						mu.Unlock()
					}
				}
			}
		}
	})
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var held []Permit
			for range rounds {
				ty := types[rng.IntN(len(types))]
				if set.Allowance(ty) != 0 {
					if p, ok := set.Acquire(ty); ok {
						held = append(held, p)
					}
				}
				if len(held) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(held))
					p := held[i]
					held = slices.Delete(held, i, i+1)
					switch rng.IntN(4) {
					case 0:
						set.Success(p)
					case 1:
						set.Failure(p, FailureKind(1<<rng.IntN(4)))
					case 2:
						set.Release(p)
					default:
						// Lost: let the probe timeout free it.
					}
				}
				if rng.IntN(500) == 0 {
					if _, err := set.Force(ty, State(1+rng.IntN(3))); err != nil {
						t.Error(err)
					}
				}
			}
			for _, p := range held {
				set.Release(p)
			}
		})
	}
	wg.Wait()
	close(stop)
	ticker.Wait()

	// Lost probes free their slots after ProbeTimeout; then nothing may be in flight.
	clk.Advance(cfg.ProbeTimeout)
	infos := set.List()

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if len(last) == 0 {
		t.Error("no transitions happened; the test exercised nothing")
	}
	for _, info := range infos {
		if info.ProbesInFlight != 0 {
			t.Errorf("%s: %d probes in flight after every permit was ended or timed out", info.Type, info.ProbesInFlight)
		}
		if info.Generation != last[info.Type].Generation && info.Generation != 1 {
			t.Errorf("%s: generation %d, last transition reported %d", info.Type, info.Generation, last[info.Type].Generation)
		}
	}
}
