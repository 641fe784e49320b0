package breaker

import (
	"strings"
	"testing"
	"time"
)

// ratioConfig opens at half the calls failing over 10s (buckets of 1s), from 4 calls.
func ratioConfig() Config {
	c := DefaultConfig()
	c.FailureRatio, c.MinCalls, c.SamplingWindow = 0.5, 4, 10*time.Second
	return c
}

// outcomes plays a string of results on one permit each: s success, t transient, f fatal,
// l lease expired, o timeout, '+' advances the clock by a second, and returns the state after
// each result, "" for '+'.
func outcomes(tb *testBundle, t *testing.T, seq string) []State {
	t.Helper()
	var states []State
	for i, c := range seq {
		if c == '+' {
			tb.clk.Advance(time.Second)
			states = append(states, 0)
			continue
		}
		p, ok := tb.set.Acquire(typ)
		if !ok {
			t.Fatalf("result %d (%c): no permit, breaker %v", i, c, stateOf(tb))
		}
		switch c {
		case 's':
			tb.set.Success(p)
		case 't':
			tb.set.FailureNote(p, Note{Kind: Transient, Job: int64(i + 1), Message: "connection refused"})
		case 'f':
			tb.set.FailureNote(p, Note{Kind: Fatal, Job: int64(i + 1), Message: "bad payload"})
		case 'l':
			tb.set.Failure(p, LeaseExpired)
		case 'o':
			tb.set.Failure(p, Timeout)
		default:
			t.Fatalf("unknown outcome %c", c)
		}
		states = append(states, stateOf(tb))
	}
	return states
}

func stateOf(tb *testBundle) State {
	info, ok := tb.set.Info(typ)
	if !ok {
		return StateClosed
	}
	return info.State
}

func TestRatioMode(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		cfg    func(*Config)
		seq    string
		openAt int // index in seq of the result that opens the breaker; -1: it stays CLOSED
	}{
		{name: "below min calls", seq: "ttt", openAt: -1},
		{name: "all failing opens at min calls", seq: "tttt", openAt: 3},
		{name: "every counted kind fails", seq: "tlot", openAt: 3},
		{name: "ratio reached exactly", seq: "sstt", openAt: 3},
		{name: "ratio below", seq: "ssst" + "ssst" + "ssst", openAt: -1},
		{name: "a success completing min calls opens", seq: "ttts", openAt: 3},
		{name: "fatal is a call, not a failure", seq: "ffffffffffffffffffff", openAt: -1},
		{name: "fatal dilutes the ratio", seq: "fffttt" + "f", openAt: 5},
		{name: "fatal dilutes below the ratio", seq: "ffffttt", openAt: -1},
		{name: "fatal counted when listed", cfg: func(c *Config) { c.Count = AllKinds }, seq: "ffff", openAt: 3},
		{name: "open on fatal", cfg: func(c *Config) { c.OpenOnFatal = true }, seq: "ssf", openAt: 2},
		{name: "lone failures slide out", seq: "tt" + "++++++++++" + "tt", openAt: -1},
		{name: "still inside the last bucket", seq: "tt" + "+++++++++" + "tt", openAt: 12},
		{name: "successes slide out too", seq: "ssssss" + "++++++++++" + "tttt", openAt: 19},
		{name: "successes within the window hold it", seq: "ssssss" + "+++++++++" + "tttt", openAt: -1},
		{name: "ratio of one needs every call failing", cfg: func(c *Config) { c.FailureRatio = 1 }, seq: "ttts" + "++++++++++" + "tttt", openAt: 17},
		{name: "count mode ignores successes", cfg: func(c *Config) { c.Mode, c.Threshold = ModeCount, 3 }, seq: "ssssssssss" + "ttt", openAt: 12},
		{name: "count mode counts fatal by default", cfg: func(c *Config) { *c = CountConfig(); c.Threshold = 3 }, seq: "fff", openAt: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := ratioConfig()
			if tt.cfg != nil {
				tt.cfg(&c)
			}
			tb := setup(t, c, nil)
			states := outcomes(tb, t, tt.seq[:max(0, min(len(tt.seq), tt.openAt+1))])
			if tt.openAt < 0 {
				states = outcomes(tb, t, tt.seq)
			}
			for i, st := range states {
				switch {
				case st == 0:
				case i == tt.openAt && st != StateOpen:
					t.Fatalf("after result %d of %q: %v, want OPEN", i, tt.seq, st)
				case i != tt.openAt && st != StateClosed:
					t.Fatalf("after result %d of %q: %v, want CLOSED (opens at %d)", i, tt.seq, st, tt.openAt)
				}
			}
		})
	}
}

func TestRatioTripAndReset(t *testing.T) {
	t.Parallel()

	tb := setup(t, ratioConfig(), nil)
	outcomes(tb, t, "sf+s+t")
	info, _ := tb.set.Info(typ)
	if info.Mode != ModeRatio || info.Calls != 4 || info.FailuresInWindow != 1 || info.Trip != nil {
		t.Fatalf("before the trip: %+v, want ratio mode, 4 calls, 1 failure, no trip", info)
	}
	tb.wantTransitions(t)
	outcomes(tb, t, "tt")
	tb.wantTransitions(t, "CLOSED->OPEN ratio")
	info, _ = tb.set.Info(typ)
	tr := info.Trip
	if tr == nil {
		t.Fatal("OPEN breaker has no trip")
	}
	if tr.Mode != ModeRatio || tr.Reason != ReasonRatio || tr.Calls != 6 || tr.Failures != 3 ||
		tr.Ratio != 0.5 || tr.Window != 10*time.Second || !tr.At.Equal(t0.Add(2*time.Second)) {
		t.Errorf("trip = %+v, want ratio 3/6 over 10s at t0+2s", *tr)
	}
	var jobs []int64
	for _, n := range tr.Last {
		jobs = append(jobs, n.Job)
		if n.Kind != Transient || n.Message != "connection refused" {
			t.Errorf("note %+v, want a transient failure with its message", n)
		}
	}
	if want := []int64{6, 1, 2}; !equalInts(jobs, want) { // job numbers restart with each string
		t.Errorf("trip's last failures are jobs %v, want %v (a fatal failure is no note)", jobs, want)
	}
	if info.ChangedAt != tr.At || info.Changed != ReasonRatio {
		t.Errorf("last change %v at %v, want ratio at the trip", info.Changed, info.ChangedAt)
	}

	tb.clk.Advance(time.Minute)
	info, err := tb.set.Reset(typ)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateClosed || info.Trip != nil || info.Changed != ReasonReset ||
		!info.ChangedAt.Equal(t0.Add(2*time.Second+time.Minute)) || info.Calls != 0 {
		t.Errorf("after reset: %+v, want CLOSED, no trip, reset now, empty window", info)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRatioWindowSurvivesRestore(t *testing.T) {
	t.Parallel()

	tb := setup(t, ratioConfig(), nil)
	outcomes(tb, t, "s+tt")
	snap := tb.set.Snapshot()

	tb2 := setup(t, ratioConfig(), nil)
	tb2.clk.Advance(tb.clk.Now().Sub(t0))
	if err := tb2.set.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if info, _ := tb2.set.Info(typ); info.Calls != 3 || info.FailuresInWindow != 2 {
		t.Fatalf("restored window holds %d calls, %d failures; want 3, 2", info.Calls, info.FailuresInWindow)
	}
	if got := outcomes(tb2, t, "t"); got[0] != StateOpen {
		t.Fatalf("fourth call after restore: %v, want OPEN", got[0])
	}
}

func TestNoteMessageTrimmed(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("é", NoteMessageLimit)
	got := trimNote(long)
	if len(got) > NoteMessageLimit+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("trimNote kept %d bytes: %q", len(got), got)
	}
}

func TestSharedRatioCountsSuccesses(t *testing.T) {
	t.Parallel()

	tb := setup(t, ratioConfig(), nil)
	var stored *Saved
	apply := func(f func(sh *Shared, p Permit)) *Shared {
		sh, err := tb.set.Shared(typ, stored)
		if err != nil {
			t.Fatal(err)
		}
		f(sh, sh.Permit(0, Permit{}))
		sv := sh.Saved()
		stored = &sv
		return sh
	}
	apply(func(sh *Shared, p Permit) { sh.Success(p) })
	apply(func(sh *Shared, p Permit) { sh.Success(p) })
	sh := apply(func(sh *Shared, p Permit) { sh.Failure(p, Transient, Attempt{Job: 1, Number: 1}) })
	if !sh.Changed() || sh.Moved() {
		t.Errorf("a failure while CLOSED: Changed %v, Moved %v; want true, false", sh.Changed(), sh.Moved())
	}
	apply(func(sh *Shared, p Permit) { sh.Failure(p, Transient, Attempt{Job: 1, Number: 1}) }) // a repeat
	if info := sh.Info(); info.Calls != 3 || info.FailuresInWindow != 1 {
		t.Fatalf("window %d calls, %d failures; want 3, 1 (a repeat counts once)", info.Calls, info.FailuresInWindow)
	}
	sh = apply(func(sh *Shared, p Permit) { sh.Failure(p, Transient, Attempt{Job: 2, Number: 1}) })
	if sh.Info().State != StateOpen || !sh.Moved() {
		t.Fatalf("2 of 4 failed: %v, want OPEN", sh.Info().State)
	}
}
