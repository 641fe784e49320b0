package broker

import (
	"errors"
	"fmt"
	"github.com/jobwire/jobwire/ratelimit"
	"time"

	"github.com/jobwire/jobwire/retry"
	"github.com/jobwire/jobwire/schedule"
)

// Config holds the broker's timing and policy settings.
type Config struct {
	// LeaseDuration is how long a lease lasts without a heartbeat.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often workers are asked to heartbeat (a third of the lease by default).
	HeartbeatInterval time.Duration
	// AttemptTimeout is how long one attempt may run unless the job sets its own.
	AttemptTimeout time.Duration
	// SweepInterval is how often expired leases and attempt timeouts are looked for.
	SweepInterval time.Duration
	// Retry is the retry policy of job types without their own.
	Retry retry.Policy
	// RetryByType overrides Retry per job type.
	RetryByType map[string]retry.Policy
	// AlwaysFatal lists error types that are fatal whatever kind the worker reported.
	AlwaysFatal []string
	// MaxBatch caps how many operations one commit carries.
	MaxBatch int
	// Retention says how long finished jobs are kept before they are deleted.
	Retention Retention
	// MaxResultBytes is the largest result a success may carry (Welcome tells workers): a
	// larger one fails its attempt as FATAL "ResultTooLarge".
	MaxResultBytes int
	// WatchPoll is how often the jobs being watched are read again, in case a change's
	// notice was lost (watch.go).
	WatchPoll time.Duration
	// Schedules are the periodic schedules the configuration file declares (schedules.go).
	Schedules []schedule.Definition
	// Concurrency are the limits of running jobs per key the configuration file sets
	// (keyconc.go), stored at start over any of the same name.
	Concurrency []ConcurrencyRule
	// RateLimits are set as the broker starts (ratelimit.go): the configuration file's word
	// wins over a change made at run time to a limit it names; other limits are kept.
	RateLimits []ratelimit.Rule
}

// Retention is how long finished jobs are kept. Deletion runs every Interval in small
// batches, each its own short write, so it never holds the store's write lock for long.
type Retention struct {
	// Succeeded is how long SUCCEEDED jobs are kept after they finished.
	Succeeded time.Duration
	// Dead is how long DEAD and CANCELLED jobs are kept, so there is time to look at them.
	Dead time.Duration
	// Audit is how long audit events (operator actions) are kept.
	Audit time.Duration
	// Interval is how often expired jobs are looked for.
	Interval time.Duration
}

// DefaultRetention keeps succeeded jobs 7 days, dead or cancelled ones 30 days and audit
// events 90 days, checking every minute.
func DefaultRetention() Retention {
	return Retention{Succeeded: 7 * 24 * time.Hour, Dead: 30 * 24 * time.Hour, Audit: 90 * 24 * time.Hour,
		Interval: time.Minute}
}

// DefaultConfig is the documented default configuration.
func DefaultConfig() Config {
	return Config{
		LeaseDuration:     30 * time.Second,
		HeartbeatInterval: 10 * time.Second,
		AttemptTimeout:    15 * time.Minute,
		SweepInterval:     time.Second,
		Retry:             retry.DefaultPolicy(),
		MaxBatch:          1024,
		Retention:         DefaultRetention(),
		MaxResultBytes:    DefaultMaxResultBytes,
		WatchPoll:         2 * time.Second,
	}
}

// Validate reports every setting that cannot work, naming each.
func (c Config) Validate() error {
	var errs []error
	if c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("lease_duration must be at least 1s, got %s", c.LeaseDuration))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("heartbeat_interval must be positive and shorter than lease_duration (%s), got %s", c.LeaseDuration, c.HeartbeatInterval))
	}
	if c.AttemptTimeout <= 0 {
		errs = append(errs, fmt.Errorf("attempt_timeout must be positive, got %s", c.AttemptTimeout))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("sweep_interval must be positive, got %s", c.SweepInterval))
	}
	if err := c.Retry.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("retry: %w", err))
	}
	for typ, p := range c.RetryByType {
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("retry for job type %q: %w", typ, err))
		}
	}
	if c.Retention.Succeeded < time.Minute {
		errs = append(errs, fmt.Errorf("retention.succeeded must be at least 1m, got %s", c.Retention.Succeeded))
	}
	if c.Retention.Dead < time.Minute {
		errs = append(errs, fmt.Errorf("retention.dead must be at least 1m, got %s", c.Retention.Dead))
	}
	if c.Retention.Audit < time.Minute {
		errs = append(errs, fmt.Errorf("retention.audit must be at least 1m, got %s", c.Retention.Audit))
	}
	if c.Retention.Interval <= 0 {
		errs = append(errs, fmt.Errorf("retention interval must be positive, got %s", c.Retention.Interval))
	}
	if c.MaxResultBytes < 0 || c.MaxResultBytes > MaxMaxResultBytes {
		errs = append(errs, fmt.Errorf("max_result_bytes must be 0..%d, got %d", MaxMaxResultBytes, c.MaxResultBytes))
	}
	errs = append(errs, validSchedules(c.Schedules)...)
	errs = append(errs, c.validLimits()...)
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max_batch must be at least 1, got %d", c.MaxBatch))
	}
	return errors.Join(errs...)
}

func (c Config) policy(jobType string) retry.Policy {
	if p, ok := c.RetryByType[jobType]; ok {
		return p
	}
	return c.Retry
}

// validSchedules checks the declared schedules, each alone and their names together.
func validSchedules(defs []schedule.Definition) []error {
	var errs []error
	seen := make(map[string]bool, len(defs))
	for i := range defs {
		if _, err := defs[i].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("schedules[%d]: %w", i, err))
		}
		if seen[defs[i].Name] {
			errs = append(errs, fmt.Errorf("schedules[%d]: the name %q is declared twice", i, defs[i].Name))
		}
		seen[defs[i].Name] = true
	}
	return errs
}

// validLimits checks the configured concurrency rules and rate limits, each as the API checks a
// change. The two kinds apply together: a lease that honours keys admits its jobs through the
// rate limits too.
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
	return errs
}
