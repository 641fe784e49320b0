package config

import (
	"fmt"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/ratelimit"
)

// RateLimitFile is one entry of rate_limits: at most rate job starts per interval, bursts of up
// to burst (default: rate), for the jobs of type and queue (default: any), each key apart when
// key is set.
type RateLimitFile struct {
	Name     string        `yaml:"name"`
	Type     string        `yaml:"type"`
	Queue    string        `yaml:"queue"`
	Key      string        `yaml:"key"`
	Rate     int           `yaml:"rate"`
	Interval time.Duration `yaml:"interval"`
	Burst    int           `yaml:"burst"`
}

// applyRateLimits checks the file's rate limits into c.Broker.RateLimits and returns what is
// wrong with them.
func (f File) applyRateLimits(c *Config) []string {
	var errs []string
	seen := map[string]bool{}
	for i, l := range f.RateLimits {
		r := ratelimit.Rule{Name: l.Name, Type: l.Type, Queue: l.Queue, Key: l.Key,
			Limit: ratelimit.Limit{Rate: l.Rate, Per: l.Interval, Burst: l.Burst}}
		if r.Burst == 0 {
			r.Burst = r.Rate
		}
		path := fmt.Sprintf("rate_limits[%d]", i)
		if err := broker.CheckRateLimit(r); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Sprintf("%s: the name %q is used twice", path, r.Name))
			continue
		}
		seen[r.Name] = true
		for _, o := range c.Broker.RateLimits {
			if ratelimit.KeysClash(&o, &r) {
				errs = append(errs, fmt.Sprintf("%s: limit %q counts some of the same jobs by key %q, and a job has one rate key",
					path, o.Name, o.Key))
			}
		}
		c.Broker.RateLimits = append(c.Broker.RateLimits, r)
	}
	return errs
}
