package main

import (
	"strings"
	"testing"

	"github.com/jobwire/jobwire/internal/brokertest"
)

// The ratelimits commands against a real broker: set, list (and stats) show the limit and its
// allowance, remove takes it away; bad input exits 2 with a sentence, before or at the broker.
func TestRateLimitsCommandsAgainstRealBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	r := runReal(t, b.Addr, "ratelimits", "set", "mail", "50/s", "--burst", "10", "--type", "mail.send")
	if r.code != 0 || !strings.Contains(r.stdout, "at most 50 starts per 1s, bursts of 10, for jobs of type mail.send in queue any") {
		t.Fatalf("set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runReal(t, b.Addr, "ratelimits", "set", "per-customer", "100/1m", "--key", "payload.customer_id")
	if r.code != 0 {
		t.Fatalf("set keyed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"ratelimits", "list"}, {"stats"}} {
		r = runReal(t, b.Addr, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "mail") || !strings.Contains(r.stdout, "50/1s") ||
			!strings.Contains(r.stdout, "payload.customer_id") || !strings.Contains(r.stdout, "0 of 0") {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	r = runReal(t, b.Addr, "ratelimits", "list", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"allowance": 10`) {
		t.Fatalf("list --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runReal(t, b.Addr, "ratelimits", "remove", "mail"); r.code != 0 || !strings.Contains(r.stdout, "removed") {
		t.Fatalf("remove: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runReal(t, b.Addr, "ratelimits", "remove", "mail"); r.code != 1 || !strings.Contains(r.stderr, `rate limit "mail" does not exist`) {
		t.Fatalf("remove again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ratelimits", "set", "x"}, "missing rate"},
		{[]string{"ratelimits", "set", "x", "fast"}, "is not N/INTERVAL"},
		{[]string{"ratelimits", "set", "x", "0/s"}, "is not N/INTERVAL"},
		{[]string{"ratelimits", "set", "x", "5/soon"}, "is not a duration"},
		{[]string{"ratelimits", "set", "x", "5/s", "--burst", "-1"}, "--burst -1 is outside 0..1000000"},
		{[]string{"ratelimits", "set", "x", "5/s", "--key", "body.id"}, "key"},
		{[]string{"ratelimits", "set", "x", "5/s", "--key", "metadata.tenant"}, `limit "per-customer"`},
		{[]string{"ratelimits", "remove"}, "missing limit name"},
	} {
		r := runReal(t, b.Addr, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
