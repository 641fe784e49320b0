package config

import (
	"strings"
	"testing"

	"github.com/jobwire/jobwire/broker"
)

// A file that sets both rate limits and concurrency rules does not load: a lease that honours
// concurrency keys applies no rate limit, so the broker refuses the mix instead of ignoring one.
func TestParseRefusesRateLimitsBesideConcurrencyRules(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
rate_limits:
  - {name: mail, type: mail.send, rate: 50, interval: 1s}
concurrency:
  - {name: sync, type: customer.sync, key: payload.customer_id, max_running: 1}
`))
	if err == nil || !strings.Contains(err.Error(), broker.ErrLimitsCombined.Error()) {
		t.Fatalf("Parse = %v, want an error saying %q", err, broker.ErrLimitsCombined)
	}
}
