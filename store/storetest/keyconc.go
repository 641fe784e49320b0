package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"KeyedLeaseHoldsEachKeyToItsLimit", testKeyedLeaseHoldsEachKeyToItsLimit},
	testCase{"KeyedJobsAreLeftOutByALeaseWithoutKeys", testKeyedJobsLeftOutWithoutKeys},
	testCase{"KeyedLeaseTakesKeysRoundRobin", testKeyedLeaseRoundRobin},
	testCase{"ConcurrencyRulesReachWaitingJobs", testConcurrencyRulesReachWaitingJobs},
	testCase{"KeyedInsertRefusesABadLimit", testKeyedInsertRefusesABadLimit},
)

// keyed is a job of type "t" with concurrency key key and limit.
func (b *bundle) keyed(key string, limit int) *store.JobInsertParams {
	p := b.job("t")
	if key != "" {
		p.Concurrency = store.Concurrency{Key: key, Limit: limit}
	}
	return p
}

// keyedLease is a lease of up to limit jobs of type "t" that honours keys.
func (b *bundle) keyedLease(limit int) *store.JobLeaseParams {
	p := b.leaseParams(limit, "t")
	p.Keyed = true
	return p
}

// A key's jobs leased or running, across leases and whatever the lease's limit, never pass the
// key's limit; a key whose held jobs end has room again; jobs without a key are not held back.
func testKeyedLeaseHoldsEachKeyToItsLimit(t *testing.T, b *bundle) {
	var ps []*store.JobInsertParams
	for range 5 {
		ps = append(ps, b.keyed("a", 1), b.keyed("b", 2), b.keyed("", 0))
	}
	b.insert(ps...)
	count := func(jobs []string) map[string]int {
		m := map[string]int{}
		for _, k := range jobs {
			m[k]++
		}
		return m
	}
	var held []string
	first := b.lease(b.keyedLease(16))
	for _, j := range first {
		c, _, err := b.s.ConcurrencyOfJob(b.ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c.Key)
	}
	if got := count(held); got["a"] != 1 || got["b"] != 2 || got[""] != 5 {
		t.Fatalf("first lease took %v by key, want a:1 b:2 and the 5 without a key", got)
	}
	if more := b.lease(b.keyedLease(16)); len(more) != 0 {
		t.Fatalf("a second lease took %d jobs while every key is at its limit", len(more))
	}
	// One of a's ends: a has room for one more, b none.
	a := first[slices.Index(held, "a")]
	ref := job.LeaseRef{JobID: a.ID, Token: a.LeaseToken}
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	again := b.lease(b.keyedLease(16))
	if len(again) != 1 {
		t.Fatalf("after a's job ended a lease took %d jobs, want 1 of a's", len(again))
	}
	if c, n, _ := b.s.ConcurrencyOfJob(b.ctx, again[0].ID); c.Key != "a" || c.Limit != 1 || n != 1 {
		t.Fatalf("job leased after a's ended: key %+v with %d held, want a's (limit 1) with 1 held", c, n)
	}
}

// A lease that does not honour keys never takes a keyed job: a broker that does not know of
// keys yet cannot overfill one.
func testKeyedJobsLeftOutWithoutKeys(t *testing.T, b *bundle) {
	stored := b.insert(b.keyed("a", 5), b.keyed("", 0), b.keyed("b", 5))
	got := b.lease(b.leaseParams(16, "t"))
	if len(got) != 1 || got[0].ID != stored[1] {
		t.Fatalf("a lease without keys took %v, want only job %d (no key)", ids(got), stored[1])
	}
	if got := b.lease(b.keyedLease(16)); len(got) != 2 {
		t.Fatalf("a lease with keys took %d jobs, want both keyed ones", len(got))
	}
}

// One key's backlog does not take every slot: within one priority the lease takes each key's
// first job, then each key's second, and so on, in dispatch order within each round.
func testKeyedLeaseRoundRobin(t *testing.T, b *bundle) {
	var ps []*store.JobInsertParams
	for range 20 {
		ps = append(ps, b.keyed("big", 100))
	}
	for k := range 4 {
		for range 2 {
			ps = append(ps, b.keyed(fmt.Sprintf("small%d", k), 100))
		}
	}
	b.insert(ps...)
	got := b.lease(b.keyedLease(8))
	var keys []string
	for _, j := range got {
		c, _, err := b.s.ConcurrencyOfJob(b.ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, c.Key)
	}
	want := []string{"big", "small0", "small1", "small2", "small3", "big", "small0", "small1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("lease took keys %v, want round-robin %v", keys, want)
	}
}

// Saving a rule again gives the jobs it keyed that still wait its new limit; deleting it lets
// them run without a key. Stats count each rule's keys.
func testConcurrencyRulesReachWaitingJobs(t *testing.T, b *bundle) {
	r := store.ConcurrencyRule{Name: "per-customer", Type: "t", Key: "payload.customer", MaxRunning: 1}
	b.write(func(tx store.Tx) error { return tx.ConcurrencyRuleSave(r) })
	b.insert(b.job("unkeyed"))
	if keyed, err := b.s.ConcurrencyKeyed(b.ctx); err != nil || keyed {
		t.Fatalf("ConcurrencyKeyed = %t, %v with no keyed job", keyed, err)
	}
	var ps []*store.JobInsertParams
	for range 3 {
		p := b.keyed("per-customer:acme", 1)
		p.Concurrency.Rule = r.Name
		ps = append(ps, p)
	}
	ids := b.insert(ps...)
	if got := b.lease(b.keyedLease(8)); len(got) != 1 {
		t.Fatalf("leased %d of acme's jobs under a limit of 1", len(got))
	}
	stats, err := b.s.ConcurrencyStats(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ConcurrencyStat{{Rule: r.Name, Keys: 1, AtLimit: 1, Held: 1, Waiting: 2}}
	if !slices.Equal(stats, want) {
		t.Fatalf("stats %+v, want %+v", stats, want)
	}
	r.MaxRunning = 2
	b.write(func(tx store.Tx) error { return tx.ConcurrencyRuleSave(r) })
	if got := b.lease(b.keyedLease(8)); len(got) != 1 {
		t.Fatalf("leased %d more of acme's jobs once its limit is 2, want 1", len(got))
	}
	rules, err := b.s.ConcurrencyRules(b.ctx)
	if err != nil || !slices.Equal(rules, []store.ConcurrencyRule{r}) {
		t.Fatalf("rules %+v (%v), want %+v", rules, err, r)
	}
	var existed bool
	b.write(func(tx store.Tx) (err error) { existed, err = tx.ConcurrencyRuleDelete(r.Name); return err })
	if !existed {
		t.Fatal("deleting the rule said it did not exist")
	}
	b.write(func(tx store.Tx) (err error) { existed, err = tx.ConcurrencyRuleDelete(r.Name); return err })
	if existed {
		t.Fatal("deleting the rule again said it existed")
	}
	if c, _, _ := b.s.ConcurrencyOfJob(b.ctx, ids[2]); c != (store.Concurrency{}) {
		t.Fatalf("a waiting job of the deleted rule keeps key %+v", c)
	}
	if got := b.lease(b.leaseParams(8, "t")); len(got) != 1 {
		t.Fatalf("a lease without keys took %d jobs once the rule was gone, want the one left", len(got))
	}
	if keyed, err := b.s.ConcurrencyKeyed(b.ctx); err != nil || !keyed {
		t.Fatalf("ConcurrencyKeyed = %t, %v with keyed jobs held", keyed, err)
	}
}

// A key without a positive limit, whose jobs no lease could ever take, and a limit without a
// key are refused, and nothing of their write is stored.
func testKeyedInsertRefusesABadLimit(t *testing.T, b *bundle) {
	for _, c := range []store.Concurrency{{Key: "a"}, {Key: "a", Limit: -1}, {Limit: 2}, {Rule: "r"}} {
		p := b.job("t")
		p.Concurrency = c
		err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
			_, err := tx.JobInsertMany([]*store.JobInsertParams{b.job("t"), p})
			return err
		})
		if err == nil {
			t.Errorf("insert with concurrency %+v: no error", c)
		}
	}
	if c := b.counts(); len(c) != 0 {
		t.Fatalf("refused inserts stored jobs: %+v", c)
	}
}
