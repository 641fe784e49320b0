package broker

import (
	"errors"
	"fmt"

	"github.com/jobwire/jobwire/store"
)

// ErrLimitsCombined is wrapped by the error of a change that would make rate limits and
// concurrency keys apply to one database at once. A lease that honours concurrency keys takes
// its jobs in the keys' fair order and does not apply rate limits, so the two together would
// let rate-limited jobs through unlimited. Until one lease does both, the broker refuses the
// second kind rather than ignore it.
var ErrLimitsCombined = errors.New("rate limits and concurrency keys cannot be combined yet")

// keysBlockRates refuses a rate limit while concurrency keys are in use (a rule, or a job with a
// key, known to this broker).
func (b *Broker) keysBlockRates() error {
	if b.svc.keys.active() {
		return fmt.Errorf("%w: concurrency keys are in use on this database (a concurrency rule, or a job enqueued with a key); remove the rules and let the keyed jobs finish first", ErrLimitsCombined)
	}
	return nil
}

// ratesBlockKeys refuses a concurrency rule, or a job with a concurrency key, while a rate limit
// is set.
func (b *Broker) ratesBlockKeys() error {
	if b.svc.rates.lease() != nil {
		return fmt.Errorf("%w: rate limits are set on this database; remove them first (jobwire ratelimits remove)", ErrLimitsCombined)
	}
	return nil
}

// assignKeys gives each job its concurrency key (keyLimits.assign), refusing keys of the
// producer's own while a rate limit is set.
func (b *Broker) assignKeys(specs []JobSpec, params []*store.JobInsertParams) error {
	if keyedSpecs(specs) {
		if err := b.ratesBlockKeys(); err != nil {
			return err
		}
	}
	return b.svc.keys.assign(specs, params)
}

// keyedSpecs reports whether a spec asks for a concurrency key of its own.
func keyedSpecs(specs []JobSpec) bool {
	for _, s := range specs {
		if s.ConcurrencyKey != "" {
			return true
		}
	}
	return false
}

// validLimits checks the configured concurrency rules and rate limits, each as the API checks a
// change, and refuses a configuration that sets both kinds.
func (c Config) validLimits() []error {
	var errs []error
	for _, r := range c.Concurrency {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range c.RateLimits {
		if err := CheckRateLimit(r); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.RateLimits) > 0 && len(c.Concurrency) > 0 {
		errs = append(errs, fmt.Errorf("%w: the configuration sets both rate_limits and concurrency", ErrLimitsCombined))
	}
	return errs
}
