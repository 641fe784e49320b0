// Package storeretry re-runs storage operations that failed for a transient reason: the
// database was busy or locked by another connection, or one command ran past its timeout.
//
// The policy knows nothing about a particular database. Each store supplies a Classifier that
// turns its driver's errors into a code name and a transient flag, so the SQLite store and a
// future PostgreSQL store share the retry loop, the backoff, the counters and the error the
// API layer reports when the database stays busy.
//
// A storage retry re-runs the same function; it is not a job attempt. The function must
// therefore be safe to run again from the start, which in practice means it is one whole
// transaction.
package storeretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"
)

// CodeCommandTimeout is the code under which attempts that ran past Options.CommandTimeout are
// counted and reported.
const CodeCommandTimeout = "COMMAND_TIMEOUT"

// ErrBusy is matched, with errors.Is, by the error Do returns once transient retries are
// exhausted. The API layer maps it to UNAVAILABLE so that clients retry the call later.
var ErrBusy = errors.New("storage is busy")

// ErrCommandTimeout is matched by the last error inside a BusyError when the final attempt ran
// past Options.CommandTimeout.
var ErrCommandTimeout = errors.New("storage command timed out")

// errCommandTimeoutCause marks the per-attempt context the policy creates, so that its expiry
// can be told apart from the expiry of the caller's own context.
var errCommandTimeoutCause = errors.New("storeretry: command timeout")

// Classifier names a driver error and says whether retrying the operation may succeed. The code
// is used as a counter key and in log lines, e.g. "SQLITE_BUSY_SNAPSHOT"; it may be empty for
// errors the driver did not produce. Classifiers must not look at message text, and must report
// cancelled contexts and data or schema errors as not transient.
type Classifier func(err error) (code string, transient bool)

// SleepFunc waits for d or until ctx is done, whichever comes first, and returns ctx's error in
// the latter case.
type SleepFunc func(ctx context.Context, d time.Duration) error

// Config is what New needs. Only Classify is required.
type Config struct {
	Options Options
	// Classify decides which errors are retried.
	Classify Classifier
	// Logger receives one line each time an operation exhausts its retries; nil means
	// slog.Default().
	Logger *slog.Logger
	// Sleep waits between attempts; nil means a real timer. Tests inject a recorder.
	Sleep SleepFunc
	// Rand draws the jitter; nil means a source seeded by the runtime. It is used under the
	// policy's lock, so one *rand.Rand may be passed even though it is not safe for concurrent
	// use.
	Rand *rand.Rand
}

// Policy runs storage operations with per-attempt timeouts and retries transient failures with
// jittered exponential backoff. It is safe for concurrent use.
type Policy struct {
	opts     Options
	classify Classifier
	logger   *slog.Logger
	sleep    SleepFunc

	randMu sync.Mutex
	rand   *rand.Rand

	countMu   sync.Mutex
	counts    map[string]int64
	exhausted map[string]int64
}

// New returns a Policy, or an error naming what is wrong with cfg.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	if cfg.Classify == nil {
		return nil, errors.New("storeretry: Classify is required")
	}
	p := &Policy{
		opts:     cfg.Options,
		classify: cfg.Classify,
		logger:   cfg.Logger,
		sleep:    cfg.Sleep,
		rand:     cfg.Rand,
		counts:   make(map[string]int64),

		exhausted: make(map[string]int64),
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	if p.sleep == nil {
		p.sleep = sleepTimer
	}
	if p.rand == nil {
		p.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return p, nil
}

// Options returns the options the policy was built with.
func (p *Policy) Options() Options { return p.opts }

// Do runs fn, giving each attempt a context bounded by Options.CommandTimeout, and runs it again
// after a transient failure, up to Options.MaxTransientRetries times. op names the operation in
// errors and logs, e.g. "JobLease".
//
// Do returns nil on success and fn's error unchanged when it is not transient. If the caller's
// ctx ends, Do stops at once, without classifying the error or counting a retry, and returns an
// error matching ctx.Err(). When the retries are exhausted it returns a *BusyError, which
// matches ErrBusy and wraps the last error. It returns one as well, without waiting, when the
// caller's deadline (see Deadline) comes before the next try would start.
func (p *Policy) Do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	for attempt := 1; ; attempt++ {
		timedOut, err := p.attempt(ctx, fn)
		if err == nil {
			return nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			if errors.Is(err, ctxErr) {
				return err
			}
			return fmt.Errorf("%w (%s: %w)", ctxErr, op, err)
		}
		var code string
		var transient bool
		if timedOut {
			// The driver's error usually is context.DeadlineExceeded; it is kept as text only,
			// so that nobody mistakes this for the caller's deadline.
			code, transient = CodeCommandTimeout, true
			err = fmt.Errorf("%w after %s: %v", ErrCommandTimeout, p.opts.CommandTimeout, err)
		} else {
			code, transient = p.classify(err)
		}
		if !transient {
			return err
		}
		if attempt > p.opts.MaxTransientRetries {
			busy := &BusyError{Op: op, Code: code, Tries: attempt, Err: err}
			p.countExhausted(code)
			p.logger.LogAttrs(ctx, slog.LevelWarn, "storage retries exhausted",
				slog.String("op", op), slog.String("code", code),
				slog.Int("tries", attempt), slog.String("error", err.Error()))
			return busy
		}
		wait := p.delay(attempt)
		if dl, ok := Deadline(ctx); ok {
			if left := time.Until(dl); left < wait {
				// The next try would start after the caller stopped waiting: an answer now,
				// saying so, is worth more than a wait whose outcome nobody hears of.
				busy := &BusyError{Op: op, Code: code, Tries: attempt, Err: err, DeadlineLeft: max(left, 0), NextWait: wait}
				p.logger.LogAttrs(ctx, slog.LevelWarn, "storage retries stopped before the caller's deadline",
					slog.String("op", op), slog.String("code", code), slog.Int("tries", attempt),
					slog.Duration("deadline_in", busy.DeadlineLeft), slog.Duration("next_try_in", wait),
					slog.String("error", err.Error()))
				return busy
			}
		}
		p.count(code)
		if serr := p.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (%s: waiting to retry after %s: %w)", serr, op, code, err)
		}
	}
}

// attempt runs fn once under the command timeout. timedOut reports that the attempt failed
// after the command timeout, and not the caller's context, ended it. That is decided from the
// context rather than from fn's error because drivers report an interrupted statement in
// different ways (context.DeadlineExceeded, an "interrupted" result code, a broken connection).
func (p *Policy) attempt(ctx context.Context, fn func(ctx context.Context) error) (timedOut bool, err error) {
	actx, cancel := context.WithTimeoutCause(ctx, p.opts.CommandTimeout, errCommandTimeoutCause)
	defer cancel()
	err = fn(actx)
	timedOut = err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errCommandTimeoutCause)
	return timedOut, err
}

// DoValue is Do for operations that return a value.
func DoValue[T any](ctx context.Context, p *Policy, op string, fn func(ctx context.Context) (T, error)) (T, error) {
	var out T
	err := p.Do(ctx, op, func(ctx context.Context) error {
		v, err := fn(ctx)
		if err != nil {
			return err
		}
		out = v
		return nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// delay is the wait before the given retry: the deterministic BaseDelay plus a jitter drawn
// from [0, TransientRetryBaseDelay/2), so that connections and brokers that failed together do
// not retry in lockstep.
func (p *Policy) delay(retry int) time.Duration {
	d := p.opts.BaseDelay(retry)
	half := int64(p.opts.TransientRetryBaseDelay / 2)
	if half <= 0 {
		return d
	}
	p.randMu.Lock()
	j := time.Duration(p.rand.Int64N(half))
	p.randMu.Unlock()
	if d > maxDuration-j {
		return maxDuration
	}
	return d + j
}

func (p *Policy) count(code string) {
	p.countMu.Lock()
	p.counts[code]++
	p.countMu.Unlock()
}

func (p *Policy) countExhausted(code string) {
	p.countMu.Lock()
	p.exhausted[code]++
	p.countMu.Unlock()
}

// Exhausted returns a snapshot of how many operations gave up after their last retry, keyed by
// the error code of the last failure.
func (p *Policy) Exhausted() map[string]int64 {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	return maps.Clone(p.exhausted)
}

// Counters returns a snapshot of how many retries were made, keyed by error code name. Only
// retries are counted: the final failure of an exhausted operation is not.
func (p *Policy) Counters() map[string]int64 {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	out := make(map[string]int64, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// BusyError is returned by Do when an operation still failed transiently after its last
// allowed try, or when the caller's deadline comes before the next try would start. It matches
// ErrBusy and unwraps to the last error.
type BusyError struct {
	Op    string // operation name given to Do
	Code  string // code of the last error, e.g. "SQLITE_BUSY" or CodeCommandTimeout
	Tries int    // attempts made: MaxTransientRetries+1, or fewer when stopped for a deadline
	Err   error  // the last attempt's error
	// NextWait is set when Do stopped early: the next try was NextWait away, and the caller's
	// deadline DeadlineLeft.
	NextWait, DeadlineLeft time.Duration
}

func (e *BusyError) Error() string {
	if e.NextWait > 0 {
		return fmt.Sprintf("%s: %s (%s after %d tries): %v; stopped retrying: the caller's deadline is %s away, the next try %s",
			e.Op, ErrBusy, e.Code, e.Tries, e.Err, e.DeadlineLeft.Round(time.Millisecond), e.NextWait.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: %s (%s after %d tries): %v", e.Op, ErrBusy, e.Code, e.Tries, e.Err)
}

// StoppedForDeadline reports whether Do gave up early because of the caller's deadline.
func (e *BusyError) StoppedForDeadline() bool { return e.NextWait > 0 }

type deadlineKey struct{}

// WithDeadline returns ctx carrying a deadline that Do respects without cancelling anything: Do
// stops retrying when the next try would start after it. A caller that runs one operation for
// many others (the broker's group commit) passes the earliest of their deadlines this way, since
// cancelling the operation would cancel it for all of them.
func WithDeadline(ctx context.Context, d time.Time) context.Context {
	return context.WithValue(ctx, deadlineKey{}, d)
}

// Deadline is the earlier of ctx's own deadline and one set with WithDeadline.
func Deadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Deadline()
	if v, vok := ctx.Value(deadlineKey{}).(time.Time); vok && (!ok || v.Before(d)) {
		d, ok = v, true
	}
	return d, ok
}

// Unwrap exposes both ErrBusy and the last error to errors.Is and errors.As.
func (e *BusyError) Unwrap() []error { return []error{ErrBusy, e.Err} }
