package metrics_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// Each rate limit shows its allowance now, its keys without allowance and its rate.
func TestScrapeShowsRateLimits(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{})
	b := tb.b
	ctx := context.Background()
	for _, l := range []*jobwirev1.RateLimit{
		{Name: "mail", Type: "mail", Rate: 10, Interval: durationpb.New(time.Second), Burst: 3},
		{Name: "per-customer", Type: "sync", Key: "metadata.customer", Rate: 1, Interval: durationpb.New(time.Minute)},
	} {
		if _, err := b.Admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: l}); err != nil {
			t.Fatal(err)
		}
	}
	b.Enqueue(&jobwirev1.JobSpec{Type: "sync", Metadata: map[string]string{"customer": "acme"}})
	w := b.Connect(brokertest.Hello("w", 4, "sync"))
	w.Assignment()
	s := tb.scrape()
	for _, c := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"jobwire_rate_limit_allowance", []string{"limit=mail"}, 3},
		{"jobwire_rate_limit_rate_per_second", []string{"limit=mail"}, 10},
		{"jobwire_rate_limit_keys_limited", []string{"limit=per-customer"}, 1},
		{"jobwire_rate_limit_allowance", []string{"limit=per-customer"}, 1},
	} {
		if got := s.value(c.name, c.labels...); got != c.value {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.value)
		}
	}
}
