package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
	"github.com/jobwire/jobwire/store"
)

// Rate limits and concurrency keys on one database: a lease that honours keys admits its jobs
// through the rate limits too.

var _ = register(
	testCase{"KeyedLeaseHoldsRateLimitedJobsWithoutTheirKeysSlot", testKeyedLeaseHoldsRateLimited},
	testCase{"KeyedLeaseReadsPastAHeldBucket", testKeyedLeaseReadsPastAHeldBucket},
	testCase{"KeyAndRateLimitsTogetherNeitherExceededNoneStarved", testKeyAndRateLimitsTogether},
)

// keyedRated is a job of type typ with concurrency key key (limit 1; none when "") and rate
// key rateKey.
func (b *bundle) keyedRated(typ, key, rateKey string) *store.JobInsertParams {
	p := b.job(typ)
	if key != "" {
		p.Concurrency = store.Concurrency{Key: key, Limit: 1}
	}
	p.RateKey = rateKey
	return p
}

// keyedRateLease is a keyed lease of up to limit jobs of types at now that applies the rate
// limits; it returns the jobs and when the first one held back may go.
func (b *bundle) keyedRateLease(limit int, now time.Time, types ...string) ([]*job.Job, time.Time) {
	b.t.Helper()
	p := b.leaseParams(limit, types...)
	p.Keyed, p.Now, p.LeaseUntil, p.Rates = true, now, now.Add(time.Minute), &store.RateLease{}
	return b.lease(p), p.Rates.NextAt
}

// A job its rate limit holds back is not leased, spends no attempt and takes no slot of its
// key: the key's next job of another type goes in its place, and so do the jobs of other keys
// behind it. A job its key keeps back takes no start from the rate limit. The lease says when
// the held job may go, and it goes then.
func testKeyedLeaseHoldsRateLimited(t *testing.T, b *bundle) {
	b.putRateLimit(ratelimit.Rule{Name: "mail", Type: "mail", Limit: ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}})
	// c's two jobs come first; its mail job, second, finds c's one slot taken.
	cSMS, cMail := b.keyedRated("sms", "c", ""), b.keyedRated("mail", "c", "")
	cSMS.Priority, cMail.Priority = 10, 10
	stored := b.insert(cSMS, cMail,
		b.keyedRated("mail", "a", ""), b.keyedRated("mail", "b", ""), b.keyedRated("mail", "", ""),
		b.keyedRated("sms", "a", ""), b.keyedRated("sms", "b", ""), b.keyedRated("sms", "", ""),
	)
	aMail, bMail, freeMail, aSMS, bSMS, freeSMS := stored[2], stored[3], stored[4], stored[5], stored[6], stored[7]
	got, next := b.keyedRateLease(16, b.now, "mail", "sms")
	want := []int64{stored[0], aMail, bSMS, freeSMS}
	slices.Sort(want)
	equal(t, "leased with a's and c's slots and the one mail start taken", sortedIDs(got), want)
	equal(t, "next held job may go at", next, b.now.Add(time.Second))
	for _, id := range []int64{bMail, freeMail, stored[1]} {
		if j := b.get(id); j.State != job.StatePending || j.Attempts != 0 {
			t.Fatalf("held mail job %d is %s with %d attempts, want PENDING with none", id, j.State, j.Attempts)
		}
	}
	if j := b.get(aSMS); j.State != job.StatePending {
		t.Fatalf("a's sms job is %s while a's one slot is held, want PENDING", j.State)
	}
	if more, _ := b.keyedRateLease(16, b.now.Add(999*time.Millisecond), "mail", "sms"); len(more) != 0 {
		t.Fatalf("999ms on a lease took %v: no mail start is due and every other job is over its key", ids(more))
	}
	got, _ = b.keyedRateLease(16, b.now.Add(time.Second), "mail", "sms")
	if len(got) != 1 || got[0].ID != bMail && got[0].ID != freeMail {
		t.Fatalf("a second on a lease took %v, want one of the held mail jobs %d, %d", ids(got), bMail, freeMail)
	}
}

// A held bucket's jobs that fill a read do not keep the jobs behind them waiting: the lease
// reads again without that bucket, and leases them.
func testKeyedLeaseReadsPastAHeldBucket(t *testing.T, b *bundle) {
	b.putRateLimit(ratelimit.Rule{Name: "mail", Type: "mail", Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}})
	first := b.insert(b.keyedRated("mail", "k0", ""))
	if got, _ := b.keyedRateLease(1, b.now, "mail"); len(got) != 1 || got[0].ID != first[0] {
		t.Fatalf("first mail lease took %v, want %d", ids(got), first[0])
	}
	// Every mail job comes before the sms jobs in fair order, and the bucket is empty.
	var ps []*store.JobInsertParams
	for k := range 4 {
		p := b.keyedRated("mail", fmt.Sprintf("m%d", k), "")
		p.Priority = 10
		ps = append(ps, p)
	}
	ps = append(ps, b.keyedRated("sms", "s0", ""), b.keyedRated("sms", "s1", ""))
	stored := b.insert(ps...)
	got, next := b.keyedRateLease(2, b.now, "mail", "sms")
	equal(t, "leased behind the held mail jobs", sortedIDs(got), stored[4:])
	equal(t, "next mail at", next, b.now.Add(time.Hour))
}

// A key limit of 1 and a rate limit, by key, over the same jobs, leased by rounds a moment apart
// whose running jobs end at random: no key ever has two jobs leased or running, no rate key
// starts more than its bucket allows by each moment, and every job is leased by the time the
// limits allow them all.
func testKeyAndRateLimitsTogether(t *testing.T, b *bundle) {
	const rate, burst = 2, 2 // per rate key, a second
	b.putRateLimit(ratelimit.Rule{Name: "api", Type: "api", Key: "payload.customer",
		Limit: ratelimit.Limit{Rate: rate, Per: time.Second, Burst: burst}})
	rng := rand.New(rand.NewPCG(ruleSeed, 35))
	customers, keys := []string{"c0", "c1", "c2"}, []string{"k0", "k1", "k2", "k3", ""}
	var ps []*store.JobInsertParams
	perCustomer := map[string]int{}
	for range 36 {
		c := customers[rng.IntN(len(customers))]
		perCustomer[c]++
		ps = append(ps, b.keyedRated("api", keys[rng.IntN(len(keys))], c), b.keyedRated("other", keys[rng.IntN(len(keys))], ""))
	}
	stored := b.insert(ps...)
	step := 100 * time.Millisecond
	most := 0
	for _, n := range perCustomer {
		most = max(most, n)
	}
	// The customer with the most jobs needs (most-burst)/rate seconds after the burst; give the
	// keys' turns one second more.
	end := b.now.Add(time.Duration(max(0, most-burst))*time.Second/rate + time.Second + step)
	type running struct {
		ref job.LeaseRef
		key string
	}
	var run []running
	starts := map[string]int{}
	done := 0
	for now := b.now; !now.After(end) && done < len(stored); now = now.Add(step) {
		// End about half of what runs.
		kept := run[:0]
		for _, r := range run {
			if rng.IntN(2) == 0 {
				kept = append(kept, r)
				continue
			}
			b.start(r.ref)
			p := b.finishParams(r.ref, job.StateSucceeded)
			p.Now = now
			b.finish(p)
		}
		run = kept
		got, _ := b.keyedRateLease(1<<rng.IntN(4), now, "api", "other")
		held := map[string]int{}
		for _, r := range run {
			held[r.key]++
		}
		for _, j := range got {
			c, _, err := b.s.ConcurrencyOfJob(b.ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if c.Key != "" {
				if held[c.Key]++; held[c.Key] > 1 {
					t.Fatalf("at %s key %s has %d jobs leased or running, over its limit of 1",
						now.Format(time.StampMilli), c.Key, held[c.Key])
				}
			}
			if j.Type == "api" {
				starts[j.RateKey]++
				allowed := burst + int(now.Sub(b.now)*rate/time.Second)
				if starts[j.RateKey] > allowed {
					t.Fatalf("at %s customer %s started %d api jobs, over the %d its limit allows by then",
						now.Format(time.StampMilli), j.RateKey, starts[j.RateKey], allowed)
				}
			}
			run = append(run, running{refOf(j), c.Key})
			done++
		}
	}
	if done != len(stored) {
		t.Fatalf("%d of %d jobs leased by %s, when the limits allow them all: some starved (api starts by customer %v of %v)",
			done, len(stored), end.Sub(b.now), starts, perCustomer)
	}
}

// sortedIDs is the ids of jobs, sorted.
func sortedIDs(jobs []*job.Job) []int64 {
	out := ids(jobs)
	slices.Sort(out)
	return out
}
