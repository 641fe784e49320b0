package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwire/jobwire/broker"
)

// rateLimitSource is a Source that has rate limits (the broker); one without is left alone.
type rateLimitSource interface {
	ListRateLimits(ctx context.Context) ([]broker.RateLimitInfo, error)
}

var (
	descRateAllowance = prometheus.NewDesc("jobwire_rate_limit_allowance",
		"Job starts a rate limit lets through now (for a keyed limit, a key that started nothing lately).", []string{"limit"}, nil)
	descRateKeysLimited = prometheus.NewDesc("jobwire_rate_limit_keys_limited",
		"Keys of a keyed rate limit with no allowance left now.", []string{"limit"}, nil)
	descRateRate = prometheus.NewDesc("jobwire_rate_limit_rate_per_second",
		"A rate limit's steady rate, in job starts per second.", []string{"limit"}, nil)
)

// rateLimits emits each rate limit's allowance. Limits are few and named by operators, so
// their names are labels as they are.
func (c *collector) rateLimits(ctx context.Context, ch chan<- prometheus.Metric) {
	src, ok := c.src.(rateLimitSource)
	if !ok {
		return
	}
	ls, err := src.ListRateLimits(ctx)
	if err != nil {
		c.log.Warn("metrics: read rate limits", "err", err)
		c.errors.Add(1)
		return
	}
	for _, l := range ls {
		ch <- prometheus.MustNewConstMetric(descRateAllowance, prometheus.GaugeValue, float64(l.Allowance), l.Name)
		ch <- prometheus.MustNewConstMetric(descRateKeysLimited, prometheus.GaugeValue, float64(l.KeysLimited), l.Name)
		ch <- prometheus.MustNewConstMetric(descRateRate, prometheus.GaugeValue, float64(l.Rate)/l.Per.Seconds(), l.Name)
	}
}
