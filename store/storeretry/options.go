package storeretry

import (
	"errors"
	"fmt"
	"time"
)

// Default values of Options. They suit an embedded SQLite file shared by a handful of
// connections: a few quick retries absorb a writer holding the lock, while the command timeout
// is long enough for a large batch and still bounds a statement stuck behind a lost lock.
const (
	DefaultMaxTransientRetries     = 3
	DefaultTransientRetryBaseDelay = 200 * time.Millisecond
	DefaultCommandTimeout          = 30 * time.Second
)

// Options are the operator-facing settings of a Policy.
type Options struct {
	// MaxTransientRetries is how many times a failed operation is re-run after a transient
	// error, so an operation runs at most MaxTransientRetries+1 times. Zero disables retries.
	MaxTransientRetries int
	// TransientRetryBaseDelay is the wait before the first retry; each further retry doubles it.
	// Zero retries without waiting, which only makes sense in tests.
	TransientRetryBaseDelay time.Duration
	// CommandTimeout bounds one attempt of an operation, independently of the caller's context,
	// so that one stuck statement cannot hold a broker call for ever.
	CommandTimeout time.Duration
}

// DefaultOptions returns the options a broker uses when its configuration sets none.
func DefaultOptions() Options {
	return Options{
		MaxTransientRetries:     DefaultMaxTransientRetries,
		TransientRetryBaseDelay: DefaultTransientRetryBaseDelay,
		CommandTimeout:          DefaultCommandTimeout,
	}
}

// Validate reports every invalid field, each error naming the field, so that a broker refuses
// to start on a bad configuration instead of retrying in a surprising way.
func (o Options) Validate() error {
	var errs []error
	if o.MaxTransientRetries < 0 {
		errs = append(errs, fmt.Errorf("storeretry: MaxTransientRetries must be zero or more, got %d", o.MaxTransientRetries))
	}
	if o.TransientRetryBaseDelay < 0 {
		errs = append(errs, fmt.Errorf("storeretry: TransientRetryBaseDelay must be zero or more, got %s", o.TransientRetryBaseDelay))
	}
	if o.CommandTimeout <= 0 {
		errs = append(errs, fmt.Errorf("storeretry: CommandTimeout must be positive, got %s", o.CommandTimeout))
	}
	return errors.Join(errs...)
}

// BaseDelay is the deterministic part of the wait before the given retry (1 for the first
// retry): TransientRetryBaseDelay * 2^(retry-1), saturating instead of overflowing. The jitter
// a Policy adds on top is kept separate so that this part can be tested exactly.
func (o Options) BaseDelay(retry int) time.Duration {
	if retry < 1 || o.TransientRetryBaseDelay <= 0 {
		return 0
	}
	d := o.TransientRetryBaseDelay
	for i := 1; i < retry; i++ {
		if d > maxDuration/2 {
			return maxDuration
		}
		d *= 2
	}
	return d
}

const maxDuration = time.Duration(1<<63 - 1)
