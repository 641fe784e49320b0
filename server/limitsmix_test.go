package server_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/ratelimit"
)

// setLimitsTogether sets, through b, one running sync per customer and a rate limit of 2 sync
// starts a second with a burst of 2 (limitsConfig in a configuration).
func setLimitsTogether(t *testing.T, b *brokertest.Bundle) {
	t.Helper()
	setRule(t, b, &jobwirev1.ConcurrencyRule{Name: "per-customer", Type: "sync", Key: "payload.customer_id", MaxRunning: 1})
	setRateLimit(t, b, &jobwirev1.RateLimit{Name: "sync", Type: "sync", Rate: 2, Interval: durationpb.New(time.Second), Burst: 2})
}

// limitsConfig is a broker configuration with setLimitsTogether's rule and limit.
func limitsConfig() broker.Config {
	cfg := brokertest.DefaultConfig()
	cfg.Concurrency = []broker.ConcurrencyRule{{Name: "per-customer", Type: "sync", Key: "payload.customer_id", MaxRunning: 1}}
	cfg.RateLimits = []ratelimit.Rule{{Name: "sync", Type: "sync", Limit: ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 2}}}
	return cfg
}

// enqueueCustomers enqueues, through b, two sync jobs each of acme, globex and initech, customer
// by customer, and returns their ids by customer.
func enqueueCustomers(t *testing.T, b *brokertest.Bundle) map[string][]int64 {
	t.Helper()
	ids := map[string][]int64{}
	for _, c := range []string{"acme", "acme", "globex", "globex", "initech", "initech"} {
		ids[c] = append(ids[c], b.Enqueue(forCustomer(c)))
	}
	return ids
}

// waitsFor waits until GetJob says job id waits PENDING, with no attempt spent, for reason.
func waitsFor(t *testing.T, b *brokertest.Bundle, id int64, reason jobwirev1.WaitReason) {
	t.Helper()
	brokertest.WaitFor(t, "job to wait for "+reason.String(), func() bool {
		r := waiting(t, b, id)
		return r.GetWaiting().GetReason() == reason && r.GetJob().GetState() == jobwirev1.JobState_JOB_STATE_PENDING &&
			r.GetJob().GetAttempts() == 0
	})
}

// A rate limit and a concurrency key apply to the same jobs at once: the burst of 2 goes to two
// customers, the third customer's job waits for the limit (no attempt spent, its key's slot
// free), a customer's second job waits for its key's slot and then for the limit once the slot
// is free, and each refill lets one job through, the keys taking turns.
func TestRateLimitAndConcurrencyKeyApplyTogether(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, pg bool) {
		b := brokertest.New(t, brokertest.Options{Postgres: pg})
		setLimitsTogether(t, b)
		ids := enqueueCustomers(t, b)
		w := b.Connect(brokertest.Hello("w", 10, "sync"))
		first, second := w.Assignment(), w.Assignment()
		if customerOf(first) != "acme" || customerOf(second) != "globex" {
			t.Fatalf("the burst went to %s and %s, want acme and globex", customerOf(first), customerOf(second))
		}
		w.Started(first)
		w.Started(second)
		waitsFor(t, b, ids["initech"][0], jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED)
		waitsFor(t, b, ids["acme"][1], jobwirev1.WaitReason_WAIT_REASON_CONCURRENCY_KEY)
		if n := leasedNow(t, b); n != 2 {
			t.Fatalf("%d jobs leased under a burst of 2", n)
		}
		// acme's slot is free, the limit is not.
		if ack := w.Succeed(first); ack.GetResultAck() == nil {
			t.Fatalf("answer to a result: %v, want its ack", ack)
		}
		waitsFor(t, b, ids["acme"][1], jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED)
		// One refill: initech, whose key was never served, goes before acme's second job.
		b.Clock.Advance(500 * time.Millisecond)
		third := w.Assignment()
		if third.GetJob().GetId() != ids["initech"][0] {
			t.Fatalf("after one refill job %d (%s) was handed out, want initech's %d", third.GetJob().GetId(),
				customerOf(third), ids["initech"][0])
		}
		w.Started(third)
		waitsFor(t, b, ids["acme"][1], jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED)
		b.Clock.Advance(500 * time.Millisecond)
		if fourth := w.Assignment(); fourth.GetJob().GetId() != ids["acme"][1] {
			t.Fatalf("after a second refill job %d (%s) was handed out, want acme's second %d (globex and initech run one each)",
				fourth.GetJob().GetId(), customerOf(fourth), ids["acme"][1])
		}
		if n := leasedNow(t, b); n != 3 {
			t.Fatalf("%d jobs leased, want globex's, initech's and acme's second", n)
		}
	})
}

// Across two brokers on one database both limits hold together: with workers free on each
// broker, never more than one job of a customer is held, and the jobs handed out never outrun
// the shared bucket, refill by refill (one running job ending before each), until every job ran.
// After each step the brokers have settled when every job finished is stored SUCCEEDED and every
// job not handed out waits for one of the two limits. Both brokers read the rule and the limit from their configuration, so neither
// leases before it knows them.
func TestClusterRateLimitAndConcurrencyKeyApplyTogether(t *testing.T) {
	t.Parallel()
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll, Config: limitsConfig()})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll, Config: limitsConfig()})
	a.WaitListening(2)
	ids := enqueueCustomers(t, a)
	var all []int64
	for _, v := range ids {
		all = append(all, v...)
	}
	workers := []*brokertest.RawWorker{a.Connect(brokertest.Hello("wa", 5, "sync")), b.Connect(brokertest.Hello("wb", 5, "sync"))}
	var running []keyedHeld
	handed, finished := map[int64]bool{}, map[int64]bool{}
	allowed := 2 // the burst; one more each refill
	settle := func() {
		t.Helper()
		brokertest.WaitFor(t, "both brokers to hand out what the limits allow", func() bool {
			for _, w := range workers {
				for m, ok := w.Poll(); ok; m, ok = w.Poll() {
					if as := m.GetAssignment(); as != nil {
						w.Started(as)
						handed[as.GetJob().GetId()] = true
						running = append(running, keyedHeld{w, as, customerOf(as)})
					}
				}
			}
			for c, n := range perCustomer(running) {
				if n > 1 {
					t.Fatalf("%d jobs of %s handed out at once across both brokers, limit 1", n, c)
				}
			}
			if len(handed) > allowed {
				t.Fatalf("%d jobs handed out across both brokers when the bucket allowed %d", len(handed), allowed)
			}
			for _, id := range all {
				r := waiting(t, a, id)
				if finished[id] {
					if r.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED {
						return false // its result is not stored yet
					}
					continue
				}
				if handed[id] {
					continue
				}
				switch r.GetWaiting().GetReason() {
				case jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED, jobwirev1.WaitReason_WAIT_REASON_CONCURRENCY_KEY:
				default:
					return false // leased and not received yet, or ready for the next round
				}
			}
			return true
		})
	}
	settle()
	for step := 0; len(handed) < len(all); step++ {
		if step > 4*len(all) {
			var left []string
			for _, id := range all {
				r := waiting(t, a, id)
				left = append(left, fmt.Sprintf("job %d (handed out %t) %s after %d attempts %s", id, handed[id],
					r.GetJob().GetState(), r.GetJob().GetAttempts(), r.GetWaiting()))
			}
			t.Fatalf("%d of %d jobs handed out after %d refills: some starved: %v; running %d", len(handed), len(all), step, left, len(running))
		}
		if len(running) > 0 {
			running[0].w.SendResult(brokertest.Ref(running[0].a), nil)
			finished[running[0].a.GetJob().GetId()] = true
			running = running[1:]
		}
		a.Clock.Advance(500 * time.Millisecond) // either broker's alarm rings
		allowed++
		settle()
	}
}
