package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/jobkey"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// Rate limits: at most N job starts per interval, with a burst, for the jobs of a type, a
// queue, or each key taken from the job (ratelimit.Rule). The rule is ratelimit's; its state,
// one bucket per limit and key, lives in the store, and the lease that takes a job takes its
// allowance in the same transaction (store.RateLease), so every broker sharing a database
// counts against the same buckets and a restart grants no fresh burst. A job over its limit
// stays PENDING, with no attempt spent, until its bucket refills: the lease says when, and an
// alarm asks for a round then.
//
// The broker keeps the limits in memory only to know whether a lease must apply them (a broker
// with none leases as before, at no cost), which jobs of an enqueue need a rate key, and which
// may be offered to a worker by their own insert (none a limit counts). In a cluster a change
// is announced as EventQueues, which has every broker read the limits again.

// ErrInvalidRateLimit is wrapped by the error of a rate limit that cannot be set.
var ErrInvalidRateLimit = errors.New("invalid rate limit")

// Audit actions of rate limit changes.
const (
	AuditRateLimitSet    = "ratelimit.set"
	AuditRateLimitRemove = "ratelimit.remove"
)

// rateLimits is the broker's copy of the stored limits and the alarm that wakes dispatch when a
// bucket refills. The limits are an immutable set swapped whole, so the paths every job takes
// (enqueue, a round's lease, an offer) read them without a lock.
type rateLimits struct {
	wake *service.Alarm
	set  atomic.Pointer[rateSet]
}

// rateSet is one version of the limits.
type rateSet struct {
	rules []ratelimit.Rule
	keys  map[string]jobkey.Expr // the keyed rules' key expressions, by rule name
}

func newRateLimits(clk clock.Clock, signal func()) *rateLimits {
	r := &rateLimits{wake: service.NewAlarm(clk, signal)}
	r.set.Store(&rateSet{})
	return r
}

// replace makes recs the limits.
func (r *rateLimits) replace(recs []store.RateLimitRecord) {
	set := &rateSet{rules: store.Rules(recs), keys: make(map[string]jobkey.Expr)}
	for _, rule := range set.rules {
		if rule.Key == "" {
			continue
		}
		// Checked when set; an expression this broker cannot read counts its jobs under "".
		if e, err := jobkey.Parse(rule.Key); err == nil {
			set.keys[rule.Name] = e
		}
	}
	r.set.Store(set)
}

// lease is the rate part of a round's leases: nil when no limit is known.
func (r *rateLimits) lease() *store.RateLease {
	if len(r.set.Load().rules) == 0 {
		return nil
	}
	return &store.RateLease{}
}

// counts reports whether some limit counts the jobs of typ in queue.
func (r *rateLimits) counts(typ, queue string) bool {
	set := r.set.Load()
	for i := range set.rules {
		if set.rules[i].Matches(typ, queue) {
			return true
		}
	}
	return false
}

// keyOf sets p's rate key: given when the producer named one, else the key the first keyed
// limit that matches p takes from it (empty when none, or when the job lacks the key).
func (r *rateLimits) keyOf(p *store.JobInsertParams, given string) {
	if given != "" {
		p.RateKey = given
		return
	}
	set := r.set.Load()
	if len(set.keys) == 0 {
		return
	}
	for i := range set.rules {
		e, keyed := set.keys[set.rules[i].Name]
		if !keyed || !set.rules[i].Matches(p.Type, p.Queue) {
			continue
		}
		p.RateKey, _ = e.Of(jobkey.Source{Type: p.Type, Queue: p.Queue, Metadata: p.Metadata, Payload: p.Payload})
		return
	}
}

// held arms the wake-up for the moment the first job a lease held back may go.
func (r *rateLimits) held(rl *store.RateLease) {
	if rl == nil || rl.NextAt.IsZero() {
		return
	}
	r.wake.SetEarlier(rl.NextAt)
}

// loadRateLimits reads the limits into memory.
func (b *Broker) loadRateLimits(ctx context.Context) error {
	recs, err := b.st.RateLimitLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load rate limits: %w", err)
	}
	b.svc.rates.replace(recs)
	return nil
}

// RateLimitInfo is a limit with its allowance now.
type RateLimitInfo struct {
	ratelimit.Rule
	UpdatedAt time.Time
	// Allowance is how many starts the limit lets through now: for a keyed limit, a key with
	// no job started lately (its burst).
	Allowance int
	// NextAt is when one more start is allowed, for a limit with no allowance now.
	NextAt time.Time
	// Keys counts the keys of a keyed limit that started jobs lately; KeysLimited those of them
	// with no allowance now.
	Keys, KeysLimited int
}

// ListRateLimits reads every limit with its allowance now, by name.
func (b *Broker) ListRateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	recs, err := b.st.RateLimitLoadAll(ctx)
	if err != nil {
		return nil, err
	}
	now := b.now()
	out := make([]RateLimitInfo, len(recs))
	for i, rec := range recs {
		buckets, err := b.st.RateBucketLoad(ctx, rec.Name)
		if err != nil {
			return nil, err
		}
		out[i] = rateLimitInfo(rec, buckets, now)
	}
	return out, nil
}

func rateLimitInfo(rec store.RateLimitRecord, buckets []store.RateBucketRecord, now time.Time) RateLimitInfo {
	info := RateLimitInfo{Rule: rec.Rule, UpdatedAt: rec.UpdatedAt, Allowance: rec.Burst}
	for _, bk := range buckets {
		bucket := ratelimit.Bucket{TAT: bk.TAT}
		if !bk.TAT.After(now) {
			continue // full again
		}
		a := rec.Allowance(bucket, now)
		if rec.Key == "" {
			info.Allowance = a
			if a == 0 {
				info.NextAt = rec.NextAt(bucket, now)
			}
			continue
		}
		info.Keys++
		if a == 0 {
			info.KeysLimited++
		}
	}
	return info
}

// CheckRateLimit refuses a limit that cannot be set, with a sentence.
func CheckRateLimit(r ratelimit.Rule) error {
	if r.Name == "" {
		return fmt.Errorf("%w: a name is required", ErrInvalidRateLimit)
	}
	if err := r.Limit.Validate(); err != nil {
		return fmt.Errorf("%w %q: %v", ErrInvalidRateLimit, r.Name, err)
	}
	if _, err := jobkey.Parse(r.Key); err != nil {
		return fmt.Errorf("%w %q: key: %v", ErrInvalidRateLimit, r.Name, err)
	}
	return nil
}

// SetRateLimit creates or changes the limit r.Name. A job has one rate key, so two keyed limits
// that can count the same job must take the same key. A changed limit keeps its buckets: what
// was spent stays spent.
func (b *Broker) SetRateLimit(ctx context.Context, r ratelimit.Rule) error {
	if err := CheckRateLimit(r); err != nil {
		return err
	}
	if r.Key != "" {
		e, _ := jobkey.Parse(r.Key)
		r.Key = e.String()
	}
	ev := store.AuditEvent{Action: AuditRateLimitSet, Target: r.Name,
		Detail: fmt.Sprintf("type=%s queue=%s key=%s limit=%s", r.Type, r.Queue, r.Key, r.Limit)}
	return b.changeRateLimit(ctx, ev, func(tx store.Tx) error {
		if err := b.checkKeyClash(ctx, r); err != nil {
			return err
		}
		return tx.RateLimitPut(store.RateLimitRecord{Rule: r, UpdatedAt: b.now()})
	})
}

// checkKeyClash refuses r when a keyed limit that can count the same jobs takes another key.
func (b *Broker) checkKeyClash(ctx context.Context, r ratelimit.Rule) error {
	if r.Key == "" {
		return nil
	}
	recs, err := b.st.RateLimitLoadAll(ctx)
	if err != nil {
		return err
	}
	for _, o := range recs {
		if ratelimit.KeyClash(&o.Rule, &r) {
			return fmt.Errorf("%w %q: limit %q counts some of the same jobs by key %q, and a job has one rate key",
				ErrInvalidRateLimit, r.Name, o.Name, o.Key)
		}
	}
	return nil
}

// RemoveRateLimit removes the limit name and its buckets; ErrNotFound when there is none.
func (b *Broker) RemoveRateLimit(ctx context.Context, name string) error {
	ev := store.AuditEvent{Action: AuditRateLimitRemove, Target: name}
	return b.changeRateLimit(ctx, ev, func(tx store.Tx) error {
		ok, err := tx.RateLimitDelete(name)
		if err == nil && !ok {
			err = fmt.Errorf("rate limit %q: %w", name, ErrNotFound)
		}
		return err
	})
}

// changeRateLimit stores a change of the limits with its audit event, announces it to the
// other brokers, reads the limits again and asks for a round: the change may let held jobs go.
func (b *Broker) changeRateLimit(ctx context.Context, ev store.AuditEvent, write func(store.Tx) error) error {
	// It locks the capped queues and the limits (PostgreSQL): after the batch's breakers.
	err := b.storeRuleChange(ctx, ruleChange{op: "rate_limit_change", locks: true, write: write,
		announce: []store.Event{{Kind: store.EventQueues, Key: "ratelimit:" + ev.Target}}, audit: ev})
	if err != nil {
		return err
	}
	return b.reloadRateLimits(ctx)
}

// rateHold is what the rate limits say of j now, read from the stored buckets (nil: nothing
// holds it back), for WhyPending.
func (b *Broker) rateHold(ctx context.Context, j *job.Job) *ratelimit.Hold {
	if !b.svc.rates.counts(j.Type, j.Queue) {
		return nil
	}
	recs, err := b.st.RateLimitLoadAll(ctx)
	if err != nil {
		return nil
	}
	g := ratelimit.NewGate(store.Rules(recs), b.now())
	for _, k := range g.Needs(j.Type, j.Queue, j.RateKey) {
		buckets, err := b.st.RateBucketLoad(ctx, k.Name)
		if err != nil {
			return nil
		}
		g.Set(k, ratelimit.Bucket{})
		for _, bk := range buckets {
			if bk.Key == k.Key {
				g.Set(k, ratelimit.Bucket{TAT: bk.TAT})
			}
		}
	}
	return g.Check(j.Type, j.Queue, j.RateKey)
}

// rateWaiting words a rate limit's hold h on j for a person.
func rateWaiting(r dispatchrule.Reason, h *ratelimit.Hold) Waiting {
	w := Waiting{Reason: WaitRateLimited, Until: h.Until, Limit: h.Rule.Rate}
	what := fmt.Sprintf("rate limit %q (%s)", h.Rule.Name, h.Rule.Limit)
	if r == dispatchrule.RateLimitedKey {
		w.Reason = WaitRateLimitedKey
		what += " for key " + strconv.Quote(h.Key)
	}
	w.Detail = fmt.Sprintf("%s has no allowance left until %s", what, h.Until.UTC().Format(time.RFC3339Nano))
	return w
}

// reloadRateLimits reads the limits again after another broker may have changed them, and asks
// for a round: a limit removed or loosened may let held jobs go.
func (b *Broker) reloadRateLimits(ctx context.Context) error {
	if err := b.loadRateLimits(ctx); err != nil {
		return err
	}
	b.signal()
	return nil
}

// startRateLimits sets the limits the configuration names, where the stored ones differ, and
// reads every limit into memory. It writes before the writer runs, as the start's recovery does.
func (b *Broker) startRateLimits(ctx context.Context) error {
	recs, err := b.st.RateLimitLoadAll(ctx)
	if err != nil {
		return fmt.Errorf("load rate limits: %w", err)
	}
	stored := make(map[string]ratelimit.Rule, len(recs))
	for _, r := range recs {
		stored[r.Name] = r.Rule
	}
	var changed []ratelimit.Rule
	for _, r := range b.cfg.RateLimits {
		if s, ok := stored[r.Name]; !ok || s != r {
			changed = append(changed, r)
		}
	}
	if len(changed) > 0 {
		err := b.st.Write(ctx, "rate_limit_config", func(tx store.Tx) error {
			for _, r := range changed {
				if err := tx.RateLimitPut(store.RateLimitRecord{Rule: r, UpdatedAt: b.now()}); err != nil {
					return err
				}
			}
			tx.Publish(store.Event{Kind: store.EventQueues, Key: "ratelimit:config"})
			return nil
		})
		if err != nil {
			return fmt.Errorf("set the configured rate limits: %w", err)
		}
	}
	return b.loadRateLimits(ctx)
}
