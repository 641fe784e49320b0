package config

import (
	"fmt"

	"github.com/jobwire/jobwire/broker"
)

// ConcurrencyFile is one limit of running jobs per key:
//
//	concurrency:
//	  - name: sync-per-customer
//	    type: customer.sync
//	    key: payload.customer_id
//	    max_running: 1
type ConcurrencyFile struct {
	Name       string `yaml:"name"`
	Type       string `yaml:"type"`
	Queue      string `yaml:"queue"`
	Key        string `yaml:"key"`
	MaxRunning int    `yaml:"max_running"`
}

// applyConcurrency checks the file's concurrency rules and sets them on c; it returns what is
// wrong, one sentence each.
func (f File) applyConcurrency(c *Config) []string {
	var errs []string
	seen := map[string]bool{}
	for i, r := range f.Concurrency {
		rule := broker.ConcurrencyRule{Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key, MaxRunning: r.MaxRunning}
		if err := rule.Validate(); err != nil {
			errs = append(errs, fmt.Sprintf("concurrency[%d]: %v", i, err))
			continue
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Sprintf("concurrency[%d]: the name %q is used twice", i, r.Name))
			continue
		}
		seen[r.Name] = true
		c.Broker.Concurrency = append(c.Broker.Concurrency, rule)
	}
	return errs
}
