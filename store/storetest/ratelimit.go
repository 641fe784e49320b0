package storetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"RateLimitsStoredChangedAndRemoved", testRateLimitsStored},
	testCase{"RateKeyStoredWithJob", testRateKeyStored},
	testCase{"RateLimitedLeaseTakesBurstThenRate", testRateLimitedLease},
	testCase{"LeaseFollowsRateRule", testLeaseFollowsRateRule},
	testCase{"RateLimitOverEveryJob", testRateLimitOverEveryJob},
)

func (b *bundle) putRateLimit(r ratelimit.Rule) {
	b.t.Helper()
	b.write(func(tx store.Tx) error { return tx.RateLimitPut(store.RateLimitRecord{Rule: r, UpdatedAt: b.now}) })
}

func (b *bundle) rateLease(limit int, now time.Time, types ...string) ([]*job.Job, time.Time) {
	b.t.Helper()
	p := b.leaseParams(limit, types...)
	p.Now, p.LeaseUntil, p.Rates = now, now.Add(time.Minute), &store.RateLease{}
	return b.lease(p), p.Rates.NextAt
}

func testRateLimitsStored(t *testing.T, b *bundle) {
	b.putRateLimit(ratelimit.Rule{Name: "b", Type: "mail", Limit: ratelimit.Limit{Rate: 5, Per: time.Second, Burst: 5}})
	b.putRateLimit(ratelimit.Rule{Name: "a", Queue: "api", Key: "payload.customer",
		Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 2}})
	b.putRateLimit(ratelimit.Rule{Name: "b", Type: "sms", Limit: ratelimit.Limit{Rate: 7, Per: time.Second, Burst: 1}})
	recs, err := b.s.RateLimitLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "limits", store.Rules(recs), []ratelimit.Rule{
		{Name: "a", Queue: "api", Key: "payload.customer", Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 2}},
		{Name: "b", Type: "sms", Limit: ratelimit.Limit{Rate: 7, Per: time.Second, Burst: 1}},
	})
	b.insert(b.job("sms"))
	if got, _ := b.rateLease(4, b.now, "sms"); len(got) != 1 {
		t.Fatalf("leased %d sms jobs, want 1", len(got))
	}
	buckets, err := b.s.RateBucketLoad(b.ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "buckets of b", buckets, []store.RateBucketRecord{{Name: "b", TAT: b.now.Add(time.Second / 7)}})
	var removed, again bool
	b.write(func(tx store.Tx) error {
		var err error
		if removed, err = tx.RateLimitDelete("b"); err != nil {
			return err
		}
		again, err = tx.RateLimitDelete("b")
		return err
	})
	if !removed || again {
		t.Fatalf("removed %t, removed again %t; want true, false", removed, again)
	}
	if buckets, _ = b.s.RateBucketLoad(b.ctx, "b"); len(buckets) != 0 {
		t.Fatalf("a removed limit kept its buckets: %v", buckets)
	}
}

func testRateKeyStored(t *testing.T, b *bundle) {
	plain, keyed := b.job("t"), b.job("t")
	keyed.RateKey = "acme"
	idem := b.job("t")
	idem.RateKey, idem.IdempotencyKey = "globex", "k1"
	got := b.insert(plain, keyed, idem)
	offered := b.job("t")
	// Ahead of the jobs waiting, so that only the limit keeps it from its offer.
	offered.RateKey, offered.Priority = "initech", 10
	b.putRateLimit(ratelimit.Rule{Name: "per-customer", Type: "t", Key: "payload.customer",
		Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}})
	ids, leased := b.insertOffered([]*store.JobInsertParams{offered}, []*store.JobOffer{b.offerTo(1)})
	if leased[0] != nil {
		t.Fatal("an offered job a rate limit counts was leased by its insert: an offer takes no allowance")
	}
	for i, want := range map[int64]string{got[0]: "", got[1]: "acme", got[2]: "globex", ids[0]: "initech"} {
		j, err := b.s.JobGet(b.ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, fmt.Sprintf("rate key of job %d", i), j.RateKey, want)
	}
}

// A limit of 2/s with a burst of 2 lets two jobs through at once, then one every 500ms, and
// says when the next may go; a keyed limit gives each key a burst of its own.
func testRateLimitedLease(t *testing.T, b *bundle) {
	b.putRateLimit(ratelimit.Rule{Name: "mail", Type: "mail", Limit: ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 2}})
	b.putRateLimit(ratelimit.Rule{Name: "api", Type: "api", Key: "metadata.customer",
		Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}})
	var ps []*store.JobInsertParams
	for range 5 {
		ps = append(ps, b.job("mail"))
	}
	for _, c := range []string{"a", "a", "b", "a", "c"} {
		p := b.job("api")
		p.RateKey = c
		ps = append(ps, p)
	}
	b.insert(ps...)
	got, next := b.rateLease(16, b.now, "mail")
	equal(t, "mail leased at once", len(got), 2)
	equal(t, "next mail at", next, b.now.Add(500*time.Millisecond))
	got, _ = b.rateLease(16, b.now.Add(499*time.Millisecond), "mail")
	equal(t, "mail leased 499ms on", len(got), 0)
	got, _ = b.rateLease(16, b.now.Add(500*time.Millisecond), "mail")
	equal(t, "mail leased 500ms on", len(got), 1)
	got, _ = b.rateLease(16, b.now, "api")
	keys := make([]string, len(got))
	for i, j := range got {
		keys[i] = j.RateKey
	}
	equal(t, "keys leased", keys, []string{"a", "b", "c"})
}

// A limit that names no type, queue or key counts every job in one bucket: once it is empty,
// the lease reads no further job.
func testRateLimitOverEveryJob(t *testing.T, b *bundle) {
	b.putRateLimit(ratelimit.Rule{Name: "all", Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}})
	b.insert(b.job("a"), b.job("b"), b.job("a"))
	got, next := b.rateLease(16, b.now, "a", "b")
	equal(t, "leased at once", len(got), 1)
	equal(t, "next at", next, b.now.Add(time.Second))
}

// The lease repeats the rate rule: over random limits (by type, by queue, by key) and jobs, a
// run of leases at moments moving on takes exactly the jobs, in dispatch order, that the pure
// rule admits with the buckets the leases before left, and says when the first held back may
// go.
func testLeaseFollowsRateRule(t *testing.T, b *bundle) {
	rng := rand.New(rand.NewPCG(ruleSeed, 3))
	seen := make(map[dispatchrule.Reason]int)
	for i := range ruleWorlds / 2 {
		w := b.newRateWorld(rng, i)
		now := b.now
		for range 4 {
			limit := 1 << rng.IntN(4)
			want, wantNext := w.admit(now, limit, seen)
			p := b.leaseParams(limit, w.types...)
			p.Now, p.LeaseUntil, p.Rates = now, now.Add(time.Hour), &store.RateLease{}
			p.EnforceQueues = rng.IntN(2) == 0
			got := ids(b.lease(p))
			if !slices.Equal(got, want) || !p.Rates.NextAt.Equal(wantNext) {
				t.Fatalf("world %d at %s, limit %d: leased %v next %s; the rule admits %v next %s\n%v",
					i, now.Format(time.StampMilli), limit, got, p.Rates.NextAt.Format(time.StampMilli), want,
					wantNext.Format(time.StampMilli), w.rules)
			}
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
	}
	for _, r := range []dispatchrule.Reason{dispatchrule.None, dispatchrule.RateLimited, dispatchrule.RateLimitedKey} {
		if seen[r] == 0 {
			t.Errorf("no job of the random worlds came out %s: draw other worlds", r)
		}
	}
}

// rateWorld is random rate limits over a world's own types and queues, and its ready jobs in
// dispatch order, with the buckets the rule has left them.
type rateWorld struct {
	types   []string
	rules   []ratelimit.Rule
	jobs    []*store.JobInsertParams // in dispatch order
	ids     []int64
	leased  map[int64]bool
	buckets map[ratelimit.BucketKey]ratelimit.Bucket
}

func (b *bundle) newRateWorld(rng *rand.Rand, i int) *rateWorld {
	name := fmt.Sprintf("r%d", i)
	w := &rateWorld{leased: map[int64]bool{}, buckets: map[ratelimit.BucketKey]ratelimit.Bucket{}}
	queues := []string{name + "-q0", name + "-q1"}
	for k := range 3 {
		w.types = append(w.types, fmt.Sprintf("%s-t%d", name, k))
	}
	for k := range 1 + rng.IntN(3) {
		r := ratelimit.Rule{Name: fmt.Sprintf("%s-l%d", name, k), Type: w.types[rng.IntN(3)],
			Limit: ratelimit.Limit{Rate: 1 + rng.IntN(4), Per: time.Second, Burst: 1 + rng.IntN(3)}}
		switch rng.IntN(3) {
		case 0:
			r.Type, r.Queue = "", queues[rng.IntN(2)]
		case 1:
			r.Key = "payload.customer"
		}
		w.rules = append(w.rules, r)
		b.putRateLimit(r)
	}
	for range 4 + rng.IntN(12) {
		p := b.job(w.types[rng.IntN(3)])
		p.Queue, p.Priority, p.RateKey = queues[rng.IntN(2)], 1000+10*i+rng.IntN(3), []string{"a", "b", "c"}[rng.IntN(3)]
		w.jobs = append(w.jobs, p)
	}
	w.ids = b.insert(w.jobs...)
	order := make([]int, len(w.jobs))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return cmp.Or(cmp.Compare(w.jobs[y].Priority, w.jobs[x].Priority), cmp.Compare(w.ids[x], w.ids[y]))
	})
	jobs, ids := make([]*store.JobInsertParams, len(order)), make([]int64, len(order))
	for k, o := range order {
		jobs[k], ids[k] = w.jobs[o], w.ids[o]
	}
	w.jobs, w.ids = jobs, ids
	return w
}

// admit is what one lease of up to limit jobs at now may take under the rule, and the moment
// the first job it holds back may go; it takes from the world's buckets. seen counts the
// reasons dispatchrule gives each job it looks at.
func (w *rateWorld) admit(now time.Time, limit int, seen map[dispatchrule.Reason]int) ([]int64, time.Time) {
	g := ratelimit.NewGate(w.rules, now)
	var out []int64
	var next time.Time
	for k, p := range w.jobs {
		if w.leased[w.ids[k]] || len(out) == limit {
			continue
		}
		for _, bk := range g.Needs(p.Type, p.Queue, p.RateKey) {
			g.Set(bk, w.buckets[bk])
		}
		h := g.Check(p.Type, p.Queue, p.RateKey)
		seen[dispatchrule.RateReason(h)]++
		if h != nil {
			if next.IsZero() || h.Until.Before(next) {
				next = h.Until
			}
			continue
		}
		g.Admit(p.Type, p.Queue, p.RateKey)
		w.leased[w.ids[k]] = true
		out = append(out, w.ids[k])
	}
	for _, c := range g.Changed() {
		w.buckets[c.BucketKey] = c.Bucket
	}
	return out, next
}
