package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// RateLimit is at most Rate job starts per Interval, with bursts of up to Burst after a quiet
// spell, for the jobs of Type and Queue (empty: any), each key apart when Key is set ("type",
// "queue", "metadata.NAME" or "payload.FIELD"). Every broker sharing the database enforces it;
// a job over the limit waits PENDING, with no attempt spent.
type RateLimit struct {
	Name     string
	Type     string
	Queue    string
	Key      string
	Rate     int
	Interval time.Duration
	// Burst is how many may start at once after a quiet spell; 0 in SetRateLimit: Rate.
	Burst int
}

// RateLimitInfo is a limit with its allowance now.
type RateLimitInfo struct {
	RateLimit
	// Allowance is how many starts it lets through now; for a keyed limit, for a key that
	// started nothing lately.
	Allowance int
	// NextAt is when one more start is allowed, while Allowance is 0.
	NextAt time.Time
	// Keys counts the keys of a keyed limit that started jobs lately; KeysLimited those with
	// no allowance left now.
	Keys, KeysLimited int
	UpdatedAt         time.Time
}

// RateKey sets the key the job counts under in the keyed rate limits that match it, instead of
// the key those limits take from the job.
func RateKey(key string) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.RateKey = key })
}

// ListRateLimits returns every rate limit with its allowance now, by name.
func (c *Client) ListRateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	resp, err := c.admin.ListRateLimits(ctx, &jobwirev1.ListRateLimitsRequest{})
	if err != nil {
		return nil, wrapErr("ListRateLimits", err)
	}
	return rateLimitsFromProto(resp.GetLimits()), nil
}

// SetRateLimit creates or changes a rate limit. A changed limit keeps what was spent of it.
func (c *Client) SetRateLimit(ctx context.Context, l RateLimit) error {
	const op = "SetRateLimit"
	rate, err := toInt32(op, "Rate", l.Rate)
	if err != nil {
		return err
	}
	burst, err := toInt32(op, "Burst", l.Burst)
	if err != nil {
		return err
	}
	_, err = c.admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: &jobwirev1.RateLimit{
		Name: l.Name, Type: l.Type, Queue: l.Queue, Key: l.Key, Rate: rate,
		Interval: durationpb.New(l.Interval), Burst: burst}})
	return wrapErr(op, err)
}

// RemoveRateLimit removes a rate limit; one that does not exist matches ErrNotFound.
func (c *Client) RemoveRateLimit(ctx context.Context, name string) error {
	_, err := c.admin.RemoveRateLimit(ctx, &jobwirev1.RemoveRateLimitRequest{Name: name})
	return wrapErr("RemoveRateLimit", err)
}

// Waiting says why a job that has not finished is not running yet.
type Waiting struct {
	// Reason is the wire's name less its prefix, in lower case: "scheduled", "rate_limited",
	// "rate_limited_key", "worker_slot"...; empty when the job waits for nothing.
	Reason string
	Detail string
	// Until is when the wait ends by itself, when it does.
	Until time.Time
	// Limit is the queue's cap, or the rate limit's rate.
	Limit int
}

// Why reads why job id is not running yet.
func (c *Client) Why(ctx context.Context, id int64) (Waiting, error) {
	resp, err := c.producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		return Waiting{}, wrapErr("GetJob", err)
	}
	w := resp.GetWaiting()
	if w == nil {
		return Waiting{}, nil
	}
	return Waiting{Reason: waitReasonName(w.GetReason()), Detail: w.GetDetail(),
		Until: timeFromProto(w.GetUntil()), Limit: int(w.GetLimit())}, nil
}

func waitReasonName(r jobwirev1.WaitReason) string {
	const prefix = len("WAIT_REASON_")
	name := r.String()
	if len(name) <= prefix {
		return ""
	}
	out := []byte(name[prefix:])
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return string(out)
}

func rateLimitsFromProto(ps []*jobwirev1.RateLimitInfo) []RateLimitInfo {
	out := make([]RateLimitInfo, len(ps))
	for i, p := range ps {
		l := p.GetLimit()
		out[i] = RateLimitInfo{
			RateLimit: RateLimit{Name: l.GetName(), Type: l.GetType(), Queue: l.GetQueue(), Key: l.GetKey(),
				Rate: int(l.GetRate()), Interval: l.GetInterval().AsDuration(), Burst: int(l.GetBurst())},
			Allowance: int(p.GetAllowance()), NextAt: timeFromProto(p.GetNextAt()), Keys: int(p.GetKeys()),
			KeysLimited: int(p.GetKeysLimited()), UpdatedAt: timeFromProto(p.GetUpdatedAt()),
		}
	}
	return out
}
