package storeretry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// fakeErr is a driver error whose classification the test decides.
type fakeErr struct {
	code      string
	transient bool
}

func (e *fakeErr) Error() string { return "fake driver error " + e.code }

var (
	errBusy       = &fakeErr{code: "FAKE_BUSY", transient: true}
	errLocked     = &fakeErr{code: "FAKE_LOCKED", transient: true}
	errConstraint = &fakeErr{code: "FAKE_CONSTRAINT", transient: false}
)

// classifyFake classifies fakeErr by its fields and anything else as not transient, which is
// what a real classifier must do with context errors.
func classifyFake(err error) (string, bool) {
	var fe *fakeErr
	if errors.As(err, &fe) {
		return fe.code, fe.transient
	}
	return "", false
}

type testBundle struct {
	policy *Policy
	logs   *bytes.Buffer

	mu     sync.Mutex
	sleeps []time.Duration
}

func (b *testBundle) recordedSleeps() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.sleeps...)
}

type setupOpts struct {
	options  Options
	classify Classifier
	rand     *rand.Rand
	realTime bool // use the policy's own timer instead of recording sleeps
}

func setup(t *testing.T, so setupOpts) *testBundle {
	t.Helper()
	b := &testBundle{logs: &bytes.Buffer{}}
	if so.options == (Options{}) {
		so.options = Options{MaxTransientRetries: 3, TransientRetryBaseDelay: 200 * time.Millisecond, CommandTimeout: time.Minute}
	}
	if so.classify == nil {
		so.classify = classifyFake
	}
	if so.rand == nil {
		so.rand = rand.New(rand.NewPCG(1, 2))
	}
	cfg := Config{
		Options:  so.options,
		Classify: so.classify,
		Logger:   slog.New(slog.NewJSONHandler(&lockedWriter{w: b.logs}, nil)),
		Rand:     so.rand,
	}
	if !so.realTime {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			b.mu.Lock()
			b.sleeps = append(b.sleeps, d)
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.policy = p
	return b
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// failing returns an fn that fails with errs in order and then succeeds, and a call counter.
func failing(errs ...error) (func(context.Context) error, *atomic.Int64) {
	var calls atomic.Int64
	return func(context.Context) error {
		n := calls.Add(1)
		if int(n) <= len(errs) {
			return errs[n-1]
		}
		return nil
	}, &calls
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    Options
		wantErr []string // substrings; nil means valid
	}{
		{name: "defaults", opts: DefaultOptions()},
		{name: "no retries and no delay", opts: Options{CommandTimeout: time.Second}},
		{name: "negative retries", opts: Options{MaxTransientRetries: -1, CommandTimeout: time.Second},
			wantErr: []string{"MaxTransientRetries", "-1"}},
		{name: "negative base delay", opts: Options{TransientRetryBaseDelay: -time.Millisecond, CommandTimeout: time.Second},
			wantErr: []string{"TransientRetryBaseDelay", "-1ms"}},
		{name: "zero command timeout", opts: Options{MaxTransientRetries: 1},
			wantErr: []string{"CommandTimeout must be positive, got 0s"}},
		{name: "every field wrong", opts: Options{MaxTransientRetries: -2, TransientRetryBaseDelay: -1, CommandTimeout: -1},
			wantErr: []string{"MaxTransientRetries", "TransientRetryBaseDelay", "CommandTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.opts.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want error mentioning %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q, want it to mention %q", err, s)
				}
			}
		})
	}
}

func TestDefaultOptions(t *testing.T) {
	t.Parallel()
	want := Options{MaxTransientRetries: 3, TransientRetryBaseDelay: 200 * time.Millisecond, CommandTimeout: 30 * time.Second}
	if got := DefaultOptions(); got != want {
		t.Fatalf("DefaultOptions() = %+v, want %+v", got, want)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Options: DefaultOptions()}); err == nil || !strings.Contains(err.Error(), "Classify") {
		t.Errorf("New without Classify: err = %v, want one naming Classify", err)
	}
	if _, err := New(Config{Options: Options{MaxTransientRetries: -1, CommandTimeout: time.Second}, Classify: classifyFake}); err == nil {
		t.Error("New with invalid options: err = nil")
	}
}

func TestBaseDelay(t *testing.T) {
	t.Parallel()
	o := Options{TransientRetryBaseDelay: 200 * time.Millisecond}
	tests := []struct {
		retry int
		want  time.Duration
	}{
		{0, 0},
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, 1600 * time.Millisecond},
		{200, maxDuration}, // saturates instead of overflowing
	}
	for _, tt := range tests {
		if got := o.BaseDelay(tt.retry); got != tt.want {
			t.Errorf("BaseDelay(%d) = %s, want %s", tt.retry, got, tt.want)
		}
	}
	if got := (Options{}).BaseDelay(3); got != 0 {
		t.Errorf("BaseDelay with zero base = %s, want 0", got)
	}
}

func TestDoRetriesTransientThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	fn, calls := failing(errBusy, errLocked, errBusy)

	if err := b.policy.Do(context.Background(), "JobLease", fn); err != nil {
		t.Fatalf("Do() = %v, want nil", err)
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("fn called %d times, want 4", got)
	}
	if got := len(b.recordedSleeps()); got != 3 {
		t.Errorf("slept %d times, want 3", got)
	}
	want := map[string]int64{"FAKE_BUSY": 2, "FAKE_LOCKED": 1}
	if got := b.policy.Counters(); !maps.Equal(got, want) {
		t.Errorf("Counters() = %v, want %v", got, want)
	}
	if b.logs.Len() != 0 {
		t.Errorf("logged %q on success, want nothing", b.logs)
	}
}

func TestDoExhaustsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var calls atomic.Int64
	err := b.policy.Do(context.Background(), "JobComplete", func(context.Context) error {
		calls.Add(1)
		return errBusy
	})

	if got := calls.Load(); got != 4 {
		t.Errorf("fn called %d times, want MaxTransientRetries+1 = 4", got)
	}
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Do() = %v, want it to match ErrBusy", err)
	}
	var fe *fakeErr
	if !errors.As(err, &fe) || fe != errBusy {
		t.Errorf("Do() = %v, want it to wrap the last driver error", err)
	}
	var be *BusyError
	if !errors.As(err, &be) {
		t.Fatalf("Do() = %T, want *BusyError", err)
	}
	if be.Op != "JobComplete" || be.Code != "FAKE_BUSY" || be.Tries != 4 {
		t.Errorf("BusyError = %+v, want op JobComplete, code FAKE_BUSY, 4 tries", be)
	}
	if want := "storage is busy (FAKE_BUSY after 4 tries)"; !strings.Contains(err.Error(), want) {
		t.Errorf("Error() = %q, want it to contain %q", err, want)
	}
	if got, want := b.policy.Counters(), map[string]int64{"FAKE_BUSY": 3}; !maps.Equal(got, want) {
		t.Errorf("Counters() = %v, want %v (the final failure is not a retry)", got, want)
	}

	lines := strings.Split(strings.TrimSpace(b.logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("logged %d lines, want exactly 1: %q", len(lines), b.logs)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("log line %q: %v", lines[0], err)
	}
	for k, want := range map[string]any{"level": "WARN", "op": "JobComplete", "code": "FAKE_BUSY", "tries": float64(4)} {
		if rec[k] != want {
			t.Errorf("log %s = %v, want %v (line %s)", k, rec[k], want, lines[0])
		}
	}
}

func TestDoZeroRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{CommandTimeout: time.Minute}})
	fn, calls := failing(errBusy)
	err := b.policy.Do(context.Background(), "op", fn)
	if !errors.Is(err, ErrBusy) || calls.Load() != 1 {
		t.Fatalf("Do() = %v after %d calls, want ErrBusy after 1 call", err, calls.Load())
	}
}

func TestDoReturnsNonTransientAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	fn, calls := failing(errBusy, errConstraint)

	err := b.policy.Do(context.Background(), "JobInsert", fn)
	if err != errConstraint {
		t.Fatalf("Do() = %v, want the constraint error unchanged", err)
	}
	if errors.Is(err, ErrBusy) {
		t.Error("a non-transient error matches ErrBusy")
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("fn called %d times, want 2", got)
	}
	if b.logs.Len() != 0 {
		t.Errorf("logged %q, want nothing", b.logs)
	}
}

// A caller's context error is never retried, even by a classifier that would retry anything.
func TestDoCallerCancelledIsNotRetried(t *testing.T) {
	t.Parallel()
	everythingTransient := func(error) (string, bool) { return "ANY", true }
	b := setup(t, setupOpts{classify: everythingTransient})
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64

	err := b.policy.Do(ctx, "op", func(ctx context.Context) error {
		calls.Add(1)
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrBusy) {
		t.Fatalf("Do() = %v, want context.Canceled and not ErrBusy", err)
	}
	if calls.Load() != 1 || len(b.recordedSleeps()) != 0 || len(b.policy.Counters()) != 0 {
		t.Errorf("calls %d, sleeps %v, counters %v; want 1 call and no retry", calls.Load(), b.recordedSleeps(), b.policy.Counters())
	}
}

// When the caller's context ends while fn returned some other error, the result still matches
// the context error so the API layer reports the cancellation.
func TestDoCallerCancelledWithDriverError(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	err := b.policy.Do(ctx, "op", func(context.Context) error {
		cancel()
		return errBusy
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) {
		t.Fatalf("Do() = %v, want it to match context.Canceled and the driver error", err)
	}
}

// Cancelling during the backoff wait ends Do promptly, using the policy's real timer.
func TestDoCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{
		options:  Options{MaxTransientRetries: 3, TransientRetryBaseDelay: time.Hour, CommandTimeout: time.Minute},
		realTime: true,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan struct{})
	var calls atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- b.policy.Do(ctx, "op", func(context.Context) error {
			if calls.Add(1) == 1 {
				close(failed)
			}
			return errBusy
		})
	}()

	<-failed
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) || errors.Is(err, ErrBusy) {
			t.Errorf("Do() = %v, want context.Canceled wrapping the last error, not ErrBusy", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return after its context was cancelled during the backoff")
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("fn called %d times, want 1", got)
	}
}

func TestDoRetriesCommandTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{MaxTransientRetries: 2, CommandTimeout: time.Millisecond}})
	var calls atomic.Int64

	err := b.policy.Do(context.Background(), "JobLease", func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("attempt context has no deadline")
		}
		if calls.Add(1) == 1 {
			<-ctx.Done() // a statement stuck until the command timeout interrupts it
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do() = %v, want nil after the timed-out attempt was retried", err)
	}
	if got, want := b.policy.Counters(), map[string]int64{CodeCommandTimeout: 1}; !maps.Equal(got, want) {
		t.Errorf("Counters() = %v, want %v", got, want)
	}
}

func TestDoCommandTimeoutExhausted(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{MaxTransientRetries: 1, CommandTimeout: time.Millisecond}})
	err := b.policy.Do(context.Background(), "op", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, ErrBusy) || !errors.Is(err, ErrCommandTimeout) {
		t.Fatalf("Do() = %v, want ErrBusy wrapping ErrCommandTimeout", err)
	}
	// The caller's deadline did not pass, so the API layer must not see DeadlineExceeded.
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do() = %v matches context.DeadlineExceeded", err)
	}
	if !strings.Contains(b.logs.String(), `"code":"COMMAND_TIMEOUT"`) {
		t.Errorf("log %q does not name COMMAND_TIMEOUT", b.logs)
	}
}

// The caller's own deadline passing is not a command timeout, even when it comes first.
func TestDoCallerDeadlineIsNotCommandTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{MaxTransientRetries: 3, CommandTimeout: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	var calls atomic.Int64
	err := b.policy.Do(ctx, "op", func(ctx context.Context) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBusy) {
		t.Fatalf("Do() = %v, want the caller's DeadlineExceeded", err)
	}
	if calls.Load() != 1 || len(b.policy.Counters()) != 0 {
		t.Errorf("calls %d, counters %v; want 1 call, no retry", calls.Load(), b.policy.Counters())
	}
}

// A driver that returns context.DeadlineExceeded on its own, without the command timeout
// passing, is classified like any other error.
func TestDoDeadlineErrorWithoutTimeoutIsClassified(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	fn, calls := failing(context.DeadlineExceeded)
	if err := b.policy.Do(context.Background(), "op", fn); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBusy) {
		t.Fatalf("Do() = %v, want DeadlineExceeded unchanged", err)
	}
	if calls.Load() != 1 {
		t.Errorf("fn called %d times, want 1", calls.Load())
	}
}

func TestDoDelaysFollowBackoffWithJitter(t *testing.T) {
	t.Parallel()
	const base = 100 * time.Millisecond
	opts := Options{MaxTransientRetries: 5, TransientRetryBaseDelay: base, CommandTimeout: time.Minute}
	b := setup(t, setupOpts{options: opts, rand: rand.New(rand.NewPCG(7, 11))})
	twin := rand.New(rand.NewPCG(7, 11)) // draws the same jitter the policy draws

	_ = b.policy.Do(context.Background(), "op", func(context.Context) error { return errBusy })

	sleeps := b.recordedSleeps()
	if len(sleeps) != 5 {
		t.Fatalf("slept %d times, want 5: %v", len(sleeps), sleeps)
	}
	jitterSeen := false
	for i, got := range sleeps {
		exp := base << i // base * 2^(retry-1)
		jitter := got - exp
		if jitter < 0 || jitter >= base/2 {
			t.Errorf("sleep %d = %s, want %s plus jitter in [0, %s)", i+1, got, exp, base/2)
		}
		if want := exp + time.Duration(twin.Int64N(int64(base/2))); got != want {
			t.Errorf("sleep %d = %s, want %s from the injected source", i+1, got, want)
		}
		jitterSeen = jitterSeen || jitter > 0
	}
	if !jitterSeen {
		t.Error("no sleep carried jitter")
	}
}

// Far into the backoff the wait saturates at the longest duration: the jitter added on top
// never overflows it into a negative (no) wait.
func TestDoDelaySaturatesWithJitter(t *testing.T) {
	t.Parallel()
	opts := Options{MaxTransientRetries: 40, TransientRetryBaseDelay: time.Hour, CommandTimeout: time.Minute}
	b := setup(t, setupOpts{options: opts, rand: rand.New(rand.NewPCG(7, 11))})
	_ = b.policy.Do(context.Background(), "op", func(context.Context) error { return errBusy })
	sleeps := b.recordedSleeps()
	for i, d := range sleeps {
		if d <= 0 || i > 0 && d < sleeps[i-1] {
			t.Fatalf("sleep %d = %s after %s: waits must grow and stay positive", i+1, d, sleeps[max(i-1, 0)])
		}
	}
	if last := sleeps[len(sleeps)-1]; last != maxDuration {
		t.Fatalf("last sleep = %s, want the longest duration", last)
	}
}

func TestDoZeroBaseDelayDoesNotWait(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{MaxTransientRetries: 2, CommandTimeout: time.Minute}})
	_ = b.policy.Do(context.Background(), "op", func(context.Context) error { return errBusy })
	for i, d := range b.recordedSleeps() {
		if d != 0 {
			t.Errorf("sleep %d = %s, want 0", i+1, d)
		}
	}
}

func TestCountersConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: Options{MaxTransientRetries: 3, CommandTimeout: time.Minute}})
	const workers = 32
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn, _ := failing(errBusy, errLocked)
			if err := b.policy.Do(context.Background(), "op", fn); err != nil {
				t.Errorf("Do() = %v", err)
			}
			_ = b.policy.Counters()
		}()
	}
	wg.Wait()
	want := map[string]int64{"FAKE_BUSY": workers, "FAKE_LOCKED": workers}
	got := b.policy.Counters()
	if !maps.Equal(got, want) {
		t.Fatalf("Counters() = %v, want %v", got, want)
	}
	got["FAKE_BUSY"] = 0
	if b.policy.Counters()["FAKE_BUSY"] != workers {
		t.Error("Counters() returned the policy's own map instead of a snapshot")
	}
}

func TestDoValue(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	var calls int
	got, err := DoValue(context.Background(), b.policy, "JobGet", func(context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 0, errBusy
		}
		return 42, nil
	})
	if err != nil || got != 42 {
		t.Fatalf("DoValue() = %d, %v; want 42, nil", got, err)
	}

	got, err = DoValue(context.Background(), b.policy, "JobGet", func(context.Context) (int, error) {
		return 7, errConstraint
	})
	if err != errConstraint || got != 0 {
		t.Fatalf("DoValue() = %d, %v; want the zero value and the error", got, err)
	}
}

func TestClockSleep(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("fires when the clock passes d", func(t *testing.T) {
		t.Parallel()
		fc := clock.NewFake(start)
		done := make(chan error, 1)
		go func() { done <- ClockSleep(fc)(context.Background(), time.Second) }()
		// The sleeper registers its timer asynchronously, so keep advancing until it returns.
		for {
			fc.Advance(time.Second)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("sleep = %v, want nil", err)
				}
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	t.Run("blocks until the clock reaches d", func(t *testing.T) {
		t.Parallel()
		const d = time.Second
		fc := &armedClock{Fake: clock.NewFake(start), armed: make(chan time.Duration, 1)}
		done := make(chan error, 1)
		go func() { done <- ClockSleep(fc)(context.Background(), d) }()
		select {
		case got := <-fc.armed:
			if got != d {
				t.Fatalf("sleep(%s) set a timer for %s", d, got)
			}
		case err := <-done:
			t.Fatalf("sleep(%s) = %v before the clock moved, want it to wait", d, err)
		}
		fc.Advance(d - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("sleep(%s) = %v with the clock 1ns short of it, want it to wait", d, err)
		default:
		}
		fc.Advance(time.Nanosecond)
		if err := <-done; err != nil {
			t.Fatalf("sleep = %v, want nil", err)
		}
	})
	t.Run("returns when the context ends", func(t *testing.T) {
		t.Parallel()
		fc := clock.NewFake(start)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ClockSleep(fc)(ctx, time.Hour) }()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("sleep = %v, want context.Canceled", err)
		}
	})
	t.Run("zero duration", func(t *testing.T) {
		t.Parallel()
		if err := ClockSleep(clock.NewFake(start))(context.Background(), 0); err != nil {
			t.Fatalf("sleep = %v, want nil", err)
		}
	})
}

// armedClock is a fake clock that reports the duration of each timer set on it.
type armedClock struct {
	*clock.Fake
	armed chan time.Duration
}

func (c *armedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := c.Fake.AfterFunc(d, f)
	c.armed <- d
	return t
}
