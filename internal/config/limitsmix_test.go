package config

import (
	"testing"
)

// A file may set rate limits and concurrency rules together: a lease that honours keys applies
// the rate limits too.
func TestParseTakesRateLimitsBesideConcurrencyRules(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
rate_limits:
  - {name: mail, type: mail.send, rate: 50, interval: 1s}
concurrency:
  - {name: sync, type: customer.sync, key: payload.customer_id, max_running: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Broker.RateLimits) != 1 || len(c.Broker.Concurrency) != 1 {
		t.Fatalf("parsed %d rate limits and %d concurrency rules, want one of each", len(c.Broker.RateLimits), len(c.Broker.Concurrency))
	}
}
