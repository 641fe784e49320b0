package config

import (
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/ratelimit"
)

func TestParseRateLimits(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
rate_limits:
  - {name: mail, type: mail.send, rate: 50, interval: 1s, burst: 10}
  - {name: per-customer, type: report.build, key: payload.customer_id, rate: 1, interval: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.Rule{
		{Name: "mail", Type: "mail.send", Limit: ratelimit.Limit{Rate: 50, Per: time.Second, Burst: 10}},
		{Name: "per-customer", Type: "report.build", Key: "payload.customer_id", Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}},
	}
	if got := cfg.Broker.RateLimits; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("rate limits = %+v, want %+v", got, want)
	}
}

func TestParseRefusesBadRateLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{`rate_limits: [{name: a, rate: 0, interval: 1s}]`, "rate_limits[0]: invalid rate limit \"a\": rate must be at least 1"},
		{`rate_limits: [{name: a, rate: 5}]`, "interval must be at least 1ms"},
		{`rate_limits: [{rate: 5, interval: 1s}]`, "a name is required"},
		{`rate_limits: [{name: a, rate: 5, interval: 1s, key: body.x}]`, "key"},
		{`rate_limits: [{name: a, rate: 5, interval: 1s}, {name: a, rate: 1, interval: 1s}]`, "rate_limits[1]: the name \"a\" is used twice"},
		{`rate_limits: [{name: a, rate: 5, interval: 1s, key: metadata.x}, {name: b, rate: 1, interval: 1s, key: metadata.y}]`,
			"rate_limits[1]: limit \"a\" counts some of the same jobs"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an error holding %q", tc.yaml, err, tc.want)
		}
	}
}
