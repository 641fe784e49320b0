package server

import (
	"context"
	"time"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/ratelimit"
)

// Bounds of a rate limit as the API takes it.
const (
	maxRateLimitRate  = 1_000_000
	maxRateLimitBurst = 1_000_000
	maxRateInterval   = 30 * 24 * time.Hour
)

// validRateLimit checks a limit to set, naming the field at fault.
func validRateLimit(l *jobwirev1.RateLimit) error {
	if l == nil {
		return invalid("limit", "is required")
	}
	if err := validName("limit.name", l.GetName()); err != nil {
		return err
	}
	if err := optionalName("limit.type", l.GetType()); err != nil {
		return err
	}
	if err := optionalName("limit.queue", l.GetQueue()); err != nil {
		return err
	}
	if n := l.GetRate(); n < 1 || n > maxRateLimitRate {
		return invalid("limit.rate", "must be 1..%d, got %d", maxRateLimitRate, n)
	}
	if n := l.GetBurst(); n < 0 || n > maxRateLimitBurst {
		return invalid("limit.burst", "must be 0 (the rate) or 1..%d, got %d", maxRateLimitBurst, n)
	}
	d := l.GetInterval()
	if d == nil {
		return invalid("limit.interval", "is required")
	}
	if err := d.CheckValid(); err != nil {
		return invalid("limit.interval", "is not a valid duration: %v", err)
	}
	if iv := d.AsDuration(); iv < time.Millisecond || iv > maxRateInterval {
		return invalid("limit.interval", "must be 1ms..%s, got %s", maxRateInterval, iv)
	}
	if err := broker.CheckRateLimit(ruleFromProto(l)); err != nil {
		return invalid("limit", "%v", err)
	}
	return nil
}

// ruleFromProto is the limit l asks for, its burst defaulted to its rate.
func ruleFromProto(l *jobwirev1.RateLimit) ratelimit.Rule {
	r := ratelimit.Rule{Name: l.GetName(), Type: l.GetType(), Queue: l.GetQueue(), Key: l.GetKey(),
		Limit: ratelimit.Limit{Rate: int(l.GetRate()), Per: l.GetInterval().AsDuration(), Burst: int(l.GetBurst())}}
	if r.Burst == 0 {
		r.Burst = r.Rate
	}
	return r
}

func rateLimitToProto(i broker.RateLimitInfo) *jobwirev1.RateLimitInfo {
	return &jobwirev1.RateLimitInfo{
		Limit: &jobwirev1.RateLimit{Name: i.Name, Type: i.Type, Queue: i.Queue, Key: i.Key,
			Rate: int32(i.Rate), Interval: dur(i.Per), Burst: int32(i.Burst)},
		Allowance: int32(i.Allowance), NextAt: ts(i.NextAt), Keys: int32(i.Keys),
		KeysLimited: int32(i.KeysLimited), UpdatedAt: ts(i.UpdatedAt),
	}
}

func (a *admin) rateLimits(ctx context.Context) ([]*jobwirev1.RateLimitInfo, error) {
	ls, err := a.b.ListRateLimits(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*jobwirev1.RateLimitInfo, len(ls))
	for i, l := range ls {
		out[i] = rateLimitToProto(l)
	}
	return out, nil
}

func (a *admin) ListRateLimits(ctx context.Context, _ *jobwirev1.ListRateLimitsRequest) (*jobwirev1.ListRateLimitsResponse, error) {
	ls, err := a.rateLimits(ctx)
	if err != nil {
		return nil, err
	}
	return &jobwirev1.ListRateLimitsResponse{Limits: ls}, nil
}

func (a *admin) SetRateLimit(ctx context.Context, req *jobwirev1.SetRateLimitRequest) (*jobwirev1.SetRateLimitResponse, error) {
	if err := a.b.SetRateLimit(ctx, ruleFromProto(req.GetLimit())); err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.SetRateLimitResponse{}, nil
}

func (a *admin) RemoveRateLimit(ctx context.Context, req *jobwirev1.RemoveRateLimitRequest) (*jobwirev1.RemoveRateLimitResponse, error) {
	if err := a.b.RemoveRateLimit(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RemoveRateLimitResponse{}, nil
}
