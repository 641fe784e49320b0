package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// forCustomer is a job of type "sync" whose payload names customer.
func forCustomer(customer string) *jobwirev1.JobSpec {
	return &jobwirev1.JobSpec{Type: "sync", Payload: []byte(fmt.Sprintf(`{"customer_id":%q}`, customer))}
}

// keyedRun is a worker loop: it starts every assignment at once and, whenever onRunning says
// so, finishes the oldest running job, until want jobs are done. Each job's customer (its
// payload) is passed to onRunning with what runs now.
type keyedRun struct {
	t       *testing.T
	workers []*brokertest.RawWorker
	running []keyedHeld
	order   []string // the customer of each job, in the order it was handed out
}

type keyedHeld struct {
	w        *brokertest.RawWorker
	a        *jobwirev1.Assignment
	customer string
}

func customerOf(a *jobwirev1.Assignment) string {
	p := string(a.GetJob().GetPayload())
	return strings.TrimSuffix(strings.TrimPrefix(p, `{"customer_id":"`), `"}`)
}

// run finishes want jobs, checking check after every poll.
func (r *keyedRun) run(want int, check func(running []keyedHeld)) {
	r.t.Helper()
	done := 0
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for done < want {
		got := false
		for _, w := range r.workers {
			for m, ok := w.Poll(); ok; m, ok = w.Poll() {
				if as := m.GetAssignment(); as != nil {
					w.Started(as)
					r.running = append(r.running, keyedHeld{w, as, customerOf(as)})
					r.order = append(r.order, customerOf(as))
					got = true
				}
			}
		}
		check(r.running)
		if len(r.running) > 0 && !got {
			h := r.running[0]
			r.running = r.running[1:]
			h.w.SendResult(brokertest.Ref(h.a), nil)
			done++
			deadline = time.Now().Add(brokertest.WaitTimeout)
			continue
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d jobs done, %d running: no job handed out within %s", done, len(r.running), brokertest.WaitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// perCustomer counts running jobs by customer.
func perCustomer(running []keyedHeld) map[string]int {
	m := map[string]int{}
	for _, h := range running {
		m[h.customer]++
	}
	return m
}

func setRule(t *testing.T, b *brokertest.Bundle, r *jobwirev1.ConcurrencyRule) {
	t.Helper()
	if _, err := b.Admin.SetConcurrencyRule(context.Background(), &jobwirev1.SetConcurrencyRuleRequest{Rule: r}); err != nil {
		t.Fatalf("set concurrency rule: %v", err)
	}
}

// A rule of one running sync per customer holds with a worker free for eight: the held jobs
// wait PENDING with no attempt spent, GetJob says they wait for their key's slot, and every
// job runs in the end.
func TestConcurrencyRuleHoldsOnePerCustomer(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	setRule(t, b, &jobwirev1.ConcurrencyRule{Name: "sync-per-customer", Type: "sync", Key: "payload.customer_id", MaxRunning: 1})
	var ids []int64
	for i := range 12 {
		ids = append(ids, b.Enqueue(forCustomer(fmt.Sprintf("c%d", i%3))))
	}
	j := getJob(t, b, ids[0])
	if j.GetConcurrencyKey() != "sync-per-customer:c0" || j.GetConcurrencyLimit() != 1 || j.GetConcurrencyRule() != "sync-per-customer" {
		t.Fatalf("job key %q limit %d rule %q, want sync-per-customer:c0, 1, sync-per-customer",
			j.GetConcurrencyKey(), j.GetConcurrencyLimit(), j.GetConcurrencyRule())
	}
	w := b.Connect(brokertest.Hello("w", 8, "sync"))
	r := &keyedRun{t: t, workers: []*brokertest.RawWorker{w}}
	// Three customers, one slot each: three run, the fourth job (c0's second) waits.
	brokertest.WaitFor(t, "three jobs handed out", func() bool {
		for m, ok := w.Poll(); ok; m, ok = w.Poll() {
			if as := m.GetAssignment(); as != nil {
				w.Started(as)
				r.running = append(r.running, keyedHeld{w, as, customerOf(as)})
			}
		}
		return len(r.running) == 3
	})
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: ids[3]})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_PENDING || res.GetJob().GetAttempts() != 0 {
		t.Fatalf("c0's second job is %s after %d attempts, want PENDING with none spent", res.GetJob().GetState(), res.GetJob().GetAttempts())
	}
	wt := res.GetWaiting()
	if wt.GetReason() != jobwirev1.WaitReason_WAIT_REASON_CONCURRENCY_KEY || wt.GetLimit() != 1 ||
		!strings.Contains(wt.GetDetail(), `"sync-per-customer:c0"`) {
		t.Fatalf("c0's second job waits for %s (limit %d): %q, want its key's slot", wt.GetReason(), wt.GetLimit(), wt.GetDetail())
	}
	r.run(12, func(running []keyedHeld) {
		for c, n := range perCustomer(running) {
			if n > 1 {
				t.Fatalf("%d jobs of customer %s running at once, limit 1", n, c)
			}
		}
	})
	stats, err := b.Admin.GetStats(context.Background(), &jobwirev1.GetStatsRequest{})
	if err != nil || len(stats.GetConcurrency()) != 1 || stats.GetConcurrency()[0].GetRule().GetName() != "sync-per-customer" {
		t.Fatalf("stats show concurrency %v (%v), want the rule", stats.GetConcurrency(), err)
	}
}

// A key the producer gives holds as a rule's does, across types and queues.
func TestConcurrencyKeyFromTheProducer(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for i := range 6 {
		s := forCustomer(fmt.Sprintf("c%d", i))
		s.ConcurrencyKey, s.ConcurrencyLimit = "tenant-a", 2
		b.Enqueue(s)
	}
	w := b.Connect(brokertest.Hello("w", 8, "sync"))
	r := &keyedRun{t: t, workers: []*brokertest.RawWorker{w}}
	most := 0
	r.run(6, func(running []keyedHeld) {
		if len(running) > 2 {
			t.Fatalf("%d jobs of key tenant-a running at once, limit 2", len(running))
		}
		most = max(most, len(running))
	})
	if most != 2 {
		t.Fatalf("at most %d jobs ran at once, want the limit of 2 used", most)
	}
}

// Round-robin across keys: one customer with 1,000 waiting jobs and ten with 10 each, all
// allowed 10 running, a worker with 10 slots. In FIFO order the small customers would wait for
// the 1,000; taken in turns, the big customer gets about one slot in eleven: every small
// customer has a job handed out among the first 11, and all their jobs among the first 130.
func TestConcurrencyKeysTakeTurns(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	setRule(t, b, &jobwirev1.ConcurrencyRule{Name: "c", Type: "sync", Key: "payload.customer_id", MaxRunning: 10})
	var specs []*jobwirev1.JobSpec
	for range 1000 {
		specs = append(specs, forCustomer("big"))
	}
	for i := range 10 {
		for range 10 {
			specs = append(specs, forCustomer(fmt.Sprintf("small%d", i)))
		}
	}
	for i := 0; i < len(specs); i += 100 {
		if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs[i : i+100]}); err != nil {
			t.Fatal(err)
		}
	}
	w := b.Connect(brokertest.Hello("w", 10, "sync"))
	r := &keyedRun{t: t, workers: []*brokertest.RawWorker{w}}
	r.run(130, func([]keyedHeld) {})
	first := map[string]int{}
	small := 0
	for i, c := range r.order[:130] {
		if _, seen := first[c]; !seen {
			first[c] = i
		}
		if c != "big" {
			small++
		}
	}
	for i := range 10 {
		if n, ok := first[fmt.Sprintf("small%d", i)]; !ok || n >= 11 {
			t.Errorf("small%d's first job was handed out %dth (seen %t), want among the first 11", i, n+1, ok)
		}
	}
	if small != 100 {
		t.Fatalf("%d of the small customers' 100 jobs among the first 130 handed out, want all: %v", small, r.order[:130])
	}
}

// Bad rules and keys are refused with the field and the reason.
func TestConcurrencyBadInput(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		rule *jobwirev1.ConcurrencyRule
		want string
	}{
		{&jobwirev1.ConcurrencyRule{Name: "x", Key: "payload.", MaxRunning: 1}, "rule.key"},
		{&jobwirev1.ConcurrencyRule{Name: "x", Key: "payload.a", MaxRunning: 0}, "rule.max_running"},
		{&jobwirev1.ConcurrencyRule{Name: "a b", Key: "payload.a", MaxRunning: 1}, "name"},
	} {
		_, err := b.Admin.SetConcurrencyRule(ctx, &jobwirev1.SetConcurrencyRuleRequest{Rule: tc.rule})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rule %v: %v, want INVALID_ARGUMENT naming %s", tc.rule, err, tc.want)
		}
	}
	s := forCustomer("c")
	s.ConcurrencyLimit = 3
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: s}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "concurrency_limit") {
		t.Errorf("a limit without a key: %v, want INVALID_ARGUMENT naming concurrency_limit", err)
	}
	_, err := b.Admin.RemoveConcurrencyRule(ctx, &jobwirev1.RemoveConcurrencyRuleRequest{Name: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("removing a rule that does not exist: %v, want NOT_FOUND", err)
	}
}

// A key's limit holds across brokers: workers on two brokers never run more than 3 of a key's
// jobs, by what they were handed or by what the database
// holds, and a rule set through one broker keys the jobs enqueued through the other. Neither
// broker's poll runs: only the cluster's events carry the rule and the freed slots.
func TestClusterConcurrencyKeyHoldsAcrossBrokers(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	setRule(t, a, &jobwirev1.ConcurrencyRule{Name: "c", Type: "sync", Key: "payload.customer_id", MaxRunning: 3})
	var ids []int64
	brokertest.WaitFor(t, "the rule keying jobs enqueued through the other broker", func() bool {
		id := b.Enqueue(forCustomer("acme"))
		if getJob(t, b, id).GetConcurrencyKey() == "c:acme" {
			ids = append(ids, id)
			return true
		}
		// Enqueued before the broker read the rule: no key, so out of the count.
		_, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: id})
		return err != nil && t.Failed()
	})
	for range 10 {
		ids = append(ids, b.Enqueue(forCustomer("acme")))
	}
	// Each broker's worker has two slots, four in all: the key's third running job is always on
	// the other broker, and each broker alone would let two and two run.
	workers := []*brokertest.RawWorker{a.Connect(brokertest.Hello("wa", 2, "sync")), b.Connect(brokertest.Hello("wb", 2, "sync"))}
	r := &keyedRun{t: t, workers: workers}
	ranOn := map[*brokertest.RawWorker]map[int64]bool{workers[0]: {}, workers[1]: {}}
	r.run(len(ids), func(running []keyedHeld) {
		if len(running) > 3 {
			t.Fatalf("%d of acme's jobs handed out at once, limit 3", len(running))
		}
		for _, h := range running {
			ranOn[h.w][h.a.GetJob().GetId()] = true
		}
		stats, err := a.Admin.ListConcurrencyRules(context.Background(), &jobwirev1.ListConcurrencyRulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stats.GetRules() {
			if s.GetRunning() > 3 {
				t.Fatalf("%d of acme's jobs held in the database, limit 3", s.GetRunning())
			}
		}
	})
	if len(ranOn[workers[0]]) == 0 || len(ranOn[workers[1]]) == 0 {
		t.Fatalf("jobs run per broker: %d and %d, want both brokers to have run some", len(ranOn[workers[0]]), len(ranOn[workers[1]]))
	}
}

// A rule of the configuration is in force from the start and survives a restart; the jobs it
// held back keep their key across the restart.
func TestConfiguredConcurrencyRuleSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.Concurrency = []broker.ConcurrencyRule{{Name: "c", Type: "sync", Key: "payload.customer_id", MaxRunning: 1}}
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	first, second := b.Enqueue(forCustomer("acme")), b.Enqueue(forCustomer("acme"))
	w := b.Connect(brokertest.Hello("w", 4, "sync"))
	a := w.Assignment()
	if a.GetJob().GetId() != first {
		t.Fatalf("got job %d, want %d", a.GetJob().GetId(), first)
	}
	w.Started(a)
	brokertest.WaitFor(t, "the first job stored RUNNING", func() bool {
		return getJob(t, b, first).GetState() == jobwirev1.JobState_JOB_STATE_RUNNING
	})
	b.Restart()
	if j := getJob(t, b, second); j.GetConcurrencyKey() != "c:acme" || j.GetState() != jobwirev1.JobState_JOB_STATE_PENDING {
		t.Fatalf("after the restart job %d is %s with key %q, want PENDING with c:acme", second, j.GetState(), j.GetConcurrencyKey())
	}
	res, err := b.Admin.ListConcurrencyRules(context.Background(), &jobwirev1.ListConcurrencyRulesRequest{})
	if err != nil || len(res.GetRules()) != 1 || res.GetRules()[0].GetRule().GetMaxRunning() != 1 {
		t.Fatalf("rules after the restart: %v (%v), want the configured one", res.GetRules(), err)
	}
	// The first job is still RUNNING (its worker is gone but its lease is live): the second
	// waits for its key, before any question of workers.
	got, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: second})
	if err != nil || got.GetWaiting().GetReason() != jobwirev1.WaitReason_WAIT_REASON_CONCURRENCY_KEY {
		t.Fatalf("after the restart the second job waits for %v (%v), want its key", got.GetWaiting(), err)
	}
}
