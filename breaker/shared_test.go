package breaker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// sharedBundle is a stored breaker state that several Sets (brokers) change in turn, as brokers
// do under the database's row lock.
type sharedBundle struct {
	tb     *testBundle
	stored *Saved
	trans  []string
}

// change builds the stored breaker on set, runs fn on it and stores the result.
func (sb *sharedBundle) change(t *testing.T, set *Set, fn func(sh *Shared)) *Shared {
	t.Helper()
	sh, err := set.Shared(typ, sb.stored)
	if err != nil {
		t.Fatal(err)
	}
	fn(sh)
	saved := sh.Saved()
	sb.stored = &saved
	for _, tr := range sh.Transitions() {
		sb.trans = append(sb.trans, fmt.Sprintf("%d:%v->%v %v", tr.Generation, tr.From, tr.To, tr.Reason))
	}
	return sh
}

func TestSharedAcrossSets(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.HalfOpenProbes = 1
	tb := setup(t, cfg, nil)
	other, err := NewSet(tb.clk, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sets := []*Set{tb.set, other, tb.set, other, tb.set} // failures 3 on one broker, 2 on the other
	sb := &sharedBundle{tb: tb}
	for i, set := range sets {
		sh := sb.change(t, set, func(sh *Shared) {
			p, ok := sh.Acquire(int64(i+1), "b")
			if !ok || p.IsProbe() {
				t.Fatalf("Acquire while CLOSED = %+v, %v", p, ok)
			}
			sh.Failure(p, Transient, Attempt{Job: int64(i + 1), Number: 1})
		})
		if want := i == len(sets)-1; sh.Moved() != want {
			t.Errorf("failure %d: Moved = %v, want %v", i+1, sh.Moved(), want)
		}
		if !sh.Changed() {
			t.Errorf("failure %d: Changed = false", i+1)
		}
	}
	if sb.stored.State != StateOpen {
		t.Fatalf("state after 5 failures on two Sets = %v, want OPEN", sb.stored.State)
	}

	// Neither Set's own breaker changed, and no callback heard of the shared transitions.
	if got := tb.state(t, typ); got != StateClosed {
		t.Errorf("the Set's own breaker is %v, want it untouched", got)
	}
	tb.wantTransitions(t)

	tb.clk.Advance(cfg.OpenFor)
	// The due OPEN -> HALF_OPEN is applied by whichever Set builds the breaker first; one
	// probe slot is taken on one Set and refused on the other.
	var probe Permit
	sb.change(t, tb.set, func(sh *Shared) {
		var ok bool
		if probe, ok = sh.Acquire(10, "a"); !ok || !probe.IsProbe() {
			t.Fatalf("probe Acquire = %+v, %v", probe, ok)
		}
	})
	if got := sb.stored.Probes; len(got) != 1 || got[0].Job != 10 || got[0].Holder != "a" || !got[0].Since.Equal(tb.clk.Now()) {
		t.Fatalf("stored probes = %+v, want job 10 held by a", got)
	}
	sb.change(t, other, func(sh *Shared) {
		if p, ok := sh.Acquire(11, "b"); ok {
			t.Errorf("second probe Acquire on another Set = %+v, want refused", p)
		}
		if sh.Changed() {
			t.Error("a refused Acquire changed the state")
		}
	})
	// Another Set that kept no permit finds the probe by its job and settles it: the slot is
	// free for the next probe.
	sb.change(t, other, func(sh *Shared) {
		if got := sh.Permit(10, Permit{}); got != probe {
			t.Fatalf("Permit(10) = %+v, want %+v", got, probe)
		}
		if got := sh.Permit(99, Permit{}); got != (Permit{}) {
			t.Errorf("Permit of a job holding no slot while HALF_OPEN = %+v, want untracked", got)
		}
		sh.Release(sh.Permit(10, Permit{}))
		if got := sh.Allowance(); got != 1 {
			t.Errorf("Allowance after release = %d, want 1", got)
		}
		if !sh.Moved() {
			t.Error("freeing a probe slot did not move the breaker")
		}
	})
	sb.change(t, other, func(sh *Shared) {
		p, _ := sh.Acquire(12, "b")
		sh.Success(p)
	})
	want := []string{"2:CLOSED->OPEN threshold", "3:OPEN->HALF_OPEN open_elapsed", "4:HALF_OPEN->CLOSED probes_succeeded"}
	if !slices.Equal(sb.trans, want) {
		t.Errorf("transitions = %q, want %q", sb.trans, want)
	}
	sb.change(t, tb.set, func(sh *Shared) {
		if got := sh.Permit(13, Permit{}); got != (Permit{Type: typ, Generation: 4}) {
			t.Errorf("Permit of an unknown job while CLOSED = %+v, want one of the current generation", got)
		}
	})
}

func TestSharedProbeTimeoutAndAdmin(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)
	sb := &sharedBundle{tb: tb}
	sb.change(t, tb.set, func(sh *Shared) {
		if err := sh.Force(StateHalfOpen); err != nil {
			t.Fatal(err)
		}
		sh.Acquire(1, "gone")
	})
	tb.clk.Advance(DefaultProbeTimeout - time.Nanosecond)
	sb.change(t, tb.set, func(sh *Shared) {
		if _, ok := sh.Acquire(2, "b"); ok {
			t.Error("probe granted while the slot of a silent probe has not timed out")
		}
	})
	tb.clk.Advance(time.Nanosecond)
	sb.change(t, tb.set, func(sh *Shared) {
		if _, ok := sh.Acquire(2, "b"); !ok {
			t.Error("probe refused after the silent probe's slot timed out")
		}
		if err := sh.Force(State(9)); !errors.Is(err, ErrInvalidState) {
			t.Errorf("Force(9) = %v, want ErrInvalidState", err)
		}
		if err := sh.Reset(); err != nil {
			t.Fatal(err)
		}
	})
	if sb.stored.State != StateClosed || len(sb.stored.Probes) != 0 || sb.stored.Generation != 3 {
		t.Errorf("after reset: %+v", *sb.stored)
	}
	if _, err := tb.set.Shared("other", sb.stored); !errors.Is(err, ErrInvalidSaved) {
		t.Errorf("Shared with another type's state = %v, want ErrInvalidSaved", err)
	}
	off := CountConfig()
	off.Disabled = true
	dis := setup(t, CountConfig(), map[string]Config{typ: off})
	sh, err := dis.set.Shared(typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Reset(); !errors.Is(err, ErrDisabled) || !sh.Disabled() {
		t.Errorf("Reset of a disabled breaker = %v, want ErrDisabled", err)
	}
}

// A cache reports no transition of its own, grants no probe slot and shows the probes of every
// broker.
func TestCache(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)
	tb.set.Cache()
	sb := &sharedBundle{tb: tb}
	sb.change(t, tb.set, func(sh *Shared) {
		if err := sh.Force(StateOpen); err != nil {
			t.Fatal(err)
		}
	})
	if err := tb.set.Load(*sb.stored); err != nil {
		t.Fatal(err)
	}
	if got := tb.set.Allowance(typ); got != 0 {
		t.Errorf("Allowance of a cached OPEN breaker = %d, want 0", got)
	}
	tb.clk.Advance(DefaultOpenFor)
	if got := tb.set.Allowance(typ); got != 1 {
		t.Errorf("Allowance of a cached breaker after OpenFor = %d, want 1", got)
	}
	if p, ok := tb.set.Acquire(typ); ok {
		t.Errorf("a cache granted %+v while HALF_OPEN", p)
	}
	tb.wantTransitions(t)
	sb.change(t, tb.set, func(sh *Shared) { sh.Acquire(1, "a") })
	if err := tb.set.Load(*sb.stored); err != nil {
		t.Fatal(err)
	}
	if info, _ := tb.set.Info(typ); info.ProbesInFlight != 1 || info.Generation != 3 || tb.set.Allowance(typ) != 0 {
		t.Errorf("cached Info = %+v, want one probe in flight in generation 3", info)
	}
	if err := tb.set.Load(Saved{Type: typ}); !errors.Is(err, ErrInvalidSaved) {
		t.Errorf("Load of an invalid state = %v, want ErrInvalidSaved", err)
	}
	sb.change(t, tb.set, func(sh *Shared) { sh.Reset() })
	if err := tb.set.Load(*sb.stored); err != nil {
		t.Fatal(err)
	}
	if p, ok := tb.set.Acquire(typ); !ok || p.Generation != 4 {
		t.Errorf("cached CLOSED Acquire = %+v, %v, want generation 4", p, ok)
	}
}

// A cache keeps the newest state it was given: one read before a newer store is skipped.
func TestCacheKeepsNewest(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)
	tb.set.Cache()
	sb := &sharedBundle{tb: tb}
	sb.change(t, tb.set, func(sh *Shared) { sh.Force(StateOpen) })
	older := *sb.stored
	sb.change(t, tb.set, func(sh *Shared) { sh.Reset() })
	if older.Version != 1 || sb.stored.Version != 2 {
		t.Fatalf("versions = %d, %d, want 1, 2", older.Version, sb.stored.Version)
	}
	if err := tb.set.Load(*sb.stored); err != nil {
		t.Fatal(err)
	}
	if err := tb.set.Load(older); err != nil {
		t.Fatal(err)
	}
	if got := tb.state(t, typ); got != StateClosed {
		t.Errorf("cache = %v after a late older state, want the newer CLOSED", got)
	}
	sb.change(t, tb.set, func(sh *Shared) {
		if sh.Changed() {
			t.Error("building a breaker changed it")
		}
	})
	if sb.stored.Version != 2 {
		t.Errorf("an unchanged state got version %d, want 2", sb.stored.Version)
	}
}

// An attempt's failure applied again, by the Set that counted it or another one reading the
// stored state, counts once, also after the breaker went round back to CLOSED; the job's next
// attempt counts; and at most Threshold attempts are remembered.
func TestSharedFailureOncePerAttempt(t *testing.T) {
	t.Parallel()
	cfg := CountConfig()
	cfg.Threshold = 3
	tb := setup(t, cfg, nil)
	other, err := NewSet(tb.clk, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb := &sharedBundle{tb: tb}
	steps := []struct {
		name     string
		set      *Set
		a        Attempt
		reset    bool  // an operator's reset first
		failures int   // stored failures after the step
		state    State // stored state after the step
	}{
		{"first failure", tb.set, Attempt{1, 1}, false, 1, StateClosed},
		{"the same attempt on another Set", other, Attempt{1, 1}, false, 1, StateClosed},
		{"the same attempt on the same Set", tb.set, Attempt{1, 1}, false, 1, StateClosed},
		{"the job's next attempt", other, Attempt{1, 2}, false, 2, StateClosed},
		{"another job opens", tb.set, Attempt{2, 1}, false, 3, StateOpen},
		{"a counted attempt after a reset", other, Attempt{2, 1}, true, 0, StateClosed},
		{"a new one after the reset", tb.set, Attempt{3, 1}, false, 1, StateClosed},
		{"and another", tb.set, Attempt{4, 1}, false, 2, StateClosed},
		{"the oldest remembered is forgotten", other, Attempt{1, 2}, false, 3, StateOpen},
	}
	for _, st := range steps {
		sb.change(t, st.set, func(sh *Shared) {
			if st.reset {
				if err := sh.Reset(); err != nil {
					t.Fatal(err)
				}
			}
			sh.Failure(sh.Permit(st.a.Job, Permit{}), Transient, st.a)
		})
		if got := len(sb.stored.Failures); got != st.failures || sb.stored.State != st.state {
			t.Errorf("%s: %d failures, %v; want %d, %v", st.name, got, sb.stored.State, st.failures, st.state)
		}
		if got := len(sb.stored.Counted); got > cfg.Threshold {
			t.Errorf("%s: %d attempts remembered, more than Threshold %d", st.name, got, cfg.Threshold)
		}
	}
}

// The ops of one batch that changed the same breaker report its transitions after the commit,
// each from its caller's goroutine: every transition goes to exactly one of them.
func TestSharedTransitionsTakenOnceAcrossGoroutines(t *testing.T) {
	t.Parallel()
	tb := setup(t, CountConfig(), nil)
	sh, err := tb.set.Shared(typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []State{StateOpen, StateHalfOpen, StateClosed} {
		if err := sh.Force(s); err != nil {
			t.Fatal(err)
		}
	}
	const takers = 8
	got := make(chan int, takers)
	start := make(chan struct{})
	for range takers {
		go func() {
			<-start
			got <- len(sh.TakeTransitions())
		}()
	}
	close(start)
	total := 0
	for range takers {
		total += <-got
	}
	if want := len(sh.Transitions()); total != want || want != 3 {
		t.Errorf("transitions taken %d times in all, want each of the %d once (3 forced)", total, want)
	}
}

// BenchmarkSharedFailure is a failure applied to a stored shared breaker as a broker applies it
// to one result: build it from the stored state, count the failure, and read the state to store
// and to cache. The stored state holds Threshold-1 failures and as many counted attempts.
func BenchmarkSharedFailure(b *testing.B) {
	cfg := CountConfig()
	set, err := NewSet(clock.NewFake(t0), cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var stored *Saved
	for i := range cfg.Threshold - 1 {
		sh, err := set.Shared(typ, stored)
		if err != nil {
			b.Fatal(err)
		}
		sh.Failure(sh.Permit(int64(i+1), Permit{}), Transient, Attempt{int64(i + 1), 1})
		sv := sh.Saved()
		stored = &sv
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sh, err := set.Shared(typ, stored)
		if err != nil {
			b.Fatal(err)
		}
		a := Attempt{int64(1000 + i), 1}
		sh.Failure(sh.Permit(a.Job, Permit{}), Transient, a)
		if !sh.Changed() {
			b.Fatal("a counted failure did not change the breaker")
		}
		_ = sh.Saved() // to store
		_ = sh.Saved() // to cache
	}
}
