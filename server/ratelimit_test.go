package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
)

// onBothStores runs f on a broker of each store (PostgreSQL skips without a server).
func onBothStores(t *testing.T, f func(t *testing.T, pg bool)) {
	for _, pg := range []bool{false, true} {
		t.Run(map[bool]string{false: "sqlite", true: "postgres"}[pg], func(t *testing.T) {
			t.Parallel()
			f(t, pg)
		})
	}
}

func setRateLimit(t *testing.T, b *brokertest.Bundle, l *jobwirev1.RateLimit) {
	t.Helper()
	if _, err := b.Admin.SetRateLimit(context.Background(), &jobwirev1.SetRateLimitRequest{Limit: l}); err != nil {
		t.Fatal(err)
	}
}

// waiting is why job id waits, as GetJob says.
func waiting(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.GetJobResponse {
	t.Helper()
	resp, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// held counts the jobs leased or running in the database.
func leasedNow(t *testing.T, b *brokertest.Bundle) int64 {
	t.Helper()
	counts, err := b.Store.JobCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		if c.State == job.StateLeased || c.State == job.StateRunning {
			n += c.Count
		}
	}
	return n
}

// A limit of 2/s with a burst of 2 hands out two jobs at once to a worker with room for ten;
// the third waits PENDING, with no attempt spent, and GetJob says it waits for the limit until
// the moment its bucket refills, when it is handed out. A restart grants no fresh burst.
func TestRateLimitHoldsJobsBackWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, pg bool) {
		b := brokertest.New(t, brokertest.Options{Postgres: pg})
		setRateLimit(t, b, &jobwirev1.RateLimit{Name: "mail", Type: "mail", Rate: 2,
			Interval: durationpb.New(time.Second), Burst: 2})
		var ids []int64
		for range 5 {
			ids = append(ids, b.Enqueue(spec("mail")))
		}
		w := b.Connect(brokertest.Hello("w1", 10, "mail"))
		got := []int64{w.Assignment().GetJob().GetId(), w.Assignment().GetJob().GetId()}
		if got[0] != ids[0] || got[1] != ids[1] {
			t.Fatalf("handed out %v first, want %v", got, ids[:2])
		}
		wantUntil := brokertest.Start.Add(500 * time.Millisecond)
		brokertest.WaitFor(t, "job 3 to wait for the rate limit", func() bool {
			r := waiting(t, b, ids[2])
			return r.GetWaiting().GetReason() == jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED
		})
		r := waiting(t, b, ids[2])
		if !r.GetWaiting().GetUntil().AsTime().Equal(wantUntil) || r.GetWaiting().GetLimit() != 2 ||
			r.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_PENDING || r.GetJob().GetAttempts() != 0 {
			t.Fatalf("job 3: %v, state %s, %d attempts; want RATE_LIMITED until %s, PENDING, no attempt",
				r.GetWaiting(), r.GetJob().GetState(), r.GetJob().GetAttempts(), wantUntil)
		}
		if n := leasedNow(t, b); n != 2 {
			t.Fatalf("%d jobs leased under a burst of 2", n)
		}
		b.Clock.Advance(500 * time.Millisecond)
		if id := w.Assignment().GetJob().GetId(); id != ids[2] {
			t.Fatalf("handed out job %d once the bucket refilled, want %d", id, ids[2])
		}
		// The bucket is empty again; a new broker on the same database reads it.
		b.Restart()
		r = waiting(t, b, ids[3])
		if r.GetWaiting().GetReason() != jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED ||
			!r.GetWaiting().GetUntil().AsTime().Equal(wantUntil.Add(500*time.Millisecond)) {
			t.Fatalf("after a restart job 4 waits %v, want RATE_LIMITED until %s", r.GetWaiting(), wantUntil.Add(500*time.Millisecond))
		}
	})
}

// A limit keyed by a payload field gives each customer a bucket of its own: one customer's
// backlog does not hold the others back, and GetJob names the key that waits.
func TestRateLimitPerKeyCountsEachKeyApart(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, pg bool) {
		b := brokertest.New(t, brokertest.Options{Postgres: pg})
		setRateLimit(t, b, &jobwirev1.RateLimit{Name: "per-customer", Type: "sync", Key: "payload.customer_id",
			Rate: 1, Interval: durationpb.New(time.Minute)})
		ids := map[string][]int64{}
		for _, c := range []string{"acme", "acme", "globex", "acme", "initech"} {
			s := spec("sync")
			s.Payload = []byte(fmt.Sprintf(`{"customer_id": %q}`, c))
			ids[c] = append(ids[c], b.Enqueue(s))
		}
		// A key the producer names goes before the one the payload holds.
		named := spec("sync")
		named.Payload, named.RateKey = []byte(`{"customer_id": "acme"}`), "umbrella"
		ids["umbrella"] = append(ids["umbrella"], b.Enqueue(named))
		w := b.Connect(brokertest.Hello("w1", 10, "sync"))
		started := map[int64]bool{}
		for range 4 {
			started[w.Assignment().GetJob().GetId()] = true
		}
		for _, c := range []string{"acme", "globex", "initech", "umbrella"} {
			if !started[ids[c][0]] {
				t.Fatalf("the first job of %s was not handed out: %v", c, started)
			}
		}
		r := waiting(t, b, ids["acme"][1])
		if r.GetWaiting().GetReason() != jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED_KEY ||
			r.GetJob().GetRateKey() != "acme" {
			t.Fatalf("acme's second job: %v, rate key %q; want RATE_LIMITED_KEY for acme", r.GetWaiting(), r.GetJob().GetRateKey())
		}
		if n := leasedNow(t, b); n != 4 {
			t.Fatalf("%d jobs leased, want one per key", n)
		}
		list, err := b.Admin.ListRateLimits(context.Background(), &jobwirev1.ListRateLimitsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if l := list.GetLimits(); len(l) != 1 || l[0].GetKeys() != 4 || l[0].GetKeysLimited() != 4 || l[0].GetAllowance() != 1 {
			t.Fatalf("ListRateLimits = %v, want 4 keys, all limited, a fresh key's allowance 1", l)
		}
		// Removing the limit lets the rest go at once.
		if _, err := b.Admin.RemoveRateLimit(context.Background(), &jobwirev1.RemoveRateLimitRequest{Name: "per-customer"}); err != nil {
			t.Fatal(err)
		}
		w.Assignment()
		w.Assignment()
	})
}

// Two brokers on one database share the bucket: a burst of 2 is two jobs across both, however
// many workers each has free, and the next goes once the bucket refills, through either.
func TestClusterRateLimitHoldsAcrossBrokers(t *testing.T) {
	t.Parallel()
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll})
	a.WaitLeader()
	setRateLimit(t, a, &jobwirev1.RateLimit{Name: "api", Queue: "api", Rate: 4,
		Interval: durationpb.New(time.Second), Burst: 2})
	// b reads the limit when it starts. A broker already running applies a limit set elsewhere
	// once the change's announcement (EventQueues) has had it read the limits again, which
	// nothing outside it can see: ListRateLimits reads the database, and waiting on it left b
	// leasing without the limit in about one run in thirty under load.
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll})
	a.WaitListening(2)
	var ids []int64
	for range 6 {
		ids = append(ids, a.Enqueue(inQueue("api")))
	}
	workers := []*brokertest.RawWorker{a.Connect(brokertest.Hello("wa", 5, "t")), b.Connect(brokertest.Hello("wb", 5, "t"))}
	brokertest.WaitFor(t, "the third job to wait for the limit", func() bool {
		return waiting(t, a, ids[2]).GetWaiting().GetReason() == jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED
	})
	if n := leasedNow(t, a); n != 2 {
		t.Fatalf("%d jobs leased across two brokers under a burst of 2", n)
	}
	a.Clock.Advance(250 * time.Millisecond) // one more allowed; either broker's alarm rings
	brokertest.WaitFor(t, "one more job leased", func() bool { return leasedNow(t, a) == 3 })
	if n := leasedNow(t, a); n != 3 {
		t.Fatalf("%d jobs leased after one refill, want 3", n)
	}
	got := 0
	for _, w := range workers {
		for m, ok := w.Poll(); ok; m, ok = w.Poll() {
			if m.GetAssignment() != nil {
				got++
			}
		}
	}
	if got > 3 {
		t.Fatalf("workers were handed %d jobs, want at most 3", got)
	}
}

// A limit set through one broker reaches a broker already running with the change's
// announcement (EventQueues): that broker then explains a job held by the limit as held by it,
// and its next round, which leases for its own worker, leases past that job.
func TestRateLimitSetReachesARunningBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	setRateLimit(t, a, &jobwirev1.RateLimit{Name: "api", Queue: "api", Rate: 1,
		Interval: durationpb.New(time.Hour), Burst: 2})
	var ids []int64
	for range 3 {
		ids = append(ids, a.Enqueue(inQueue("api")))
	}
	wa := a.Connect(brokertest.Hello("wa", 2, "t")) // full once it has the burst
	wa.Assignment()
	wa.Assignment()
	brokertest.WaitFor(t, "b to hold the third job for the limit", func() bool {
		return waiting(t, b, ids[2]).GetWaiting().GetReason() == jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED
	})
	// Only b's worker has room: the round that leases the job no limit counts would lease the
	// older third job first, were the limit unknown to b.
	wb := b.Connect(brokertest.Hello("wb", 5, "t"))
	free := a.Enqueue(inQueue("free"))
	if got := wb.Assignment().GetJob().GetId(); got != free {
		t.Fatalf("b's worker was handed job %d, want %d, the one no limit counts", got, free)
	}
	if m, ok := wb.Poll(); ok && m.GetAssignment() != nil {
		t.Fatalf("b's worker was handed job %d too", m.GetAssignment().GetJob().GetId())
	}
	if n := leasedNow(t, a); n != 3 {
		t.Fatalf("%d jobs leased, want 3: the burst of 2 and the job no limit counts", n)
	}
}

// Bad limits are refused with the field at fault; removing a limit that does not exist is
// NOT_FOUND; two keyed limits over the same jobs must take the same key.
func TestRateLimitRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	sec := durationpb.New(time.Second)
	for _, tc := range []struct {
		l    *jobwirev1.RateLimit
		want string
	}{
		{nil, "limit: is required"},
		{&jobwirev1.RateLimit{Rate: 1, Interval: sec}, "limit.name"},
		{&jobwirev1.RateLimit{Name: "x", Interval: sec}, "limit.rate"},
		{&jobwirev1.RateLimit{Name: "x", Rate: 1}, "limit.interval"},
		{&jobwirev1.RateLimit{Name: "x", Rate: 1, Interval: durationpb.New(time.Microsecond)}, "limit.interval"},
		{&jobwirev1.RateLimit{Name: "x", Rate: 1, Interval: sec, Burst: -1}, "limit.burst"},
		{&jobwirev1.RateLimit{Name: "x", Rate: 1, Interval: sec, Key: "body.x"}, "key"},
		{&jobwirev1.RateLimit{Name: "x", Type: "bad type", Rate: 1, Interval: sec}, "limit.type"},
	} {
		_, err := b.Admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: tc.l})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("SetRateLimit(%v) = %v, want INVALID_ARGUMENT naming %s", tc.l, err, tc.want)
		}
	}
	_, err := b.Admin.RemoveRateLimit(ctx, &jobwirev1.RemoveRateLimitRequest{Name: "none"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("RemoveRateLimit of no limit = %v, want NOT_FOUND", err)
	}
	setRateLimit(t, b, &jobwirev1.RateLimit{Name: "a", Type: "t", Key: "metadata.customer", Rate: 1, Interval: sec})
	_, err = b.Admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: &jobwirev1.RateLimit{
		Name: "b", Key: "payload.tenant", Rate: 1, Interval: sec}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), `limit "a"`) {
		t.Fatalf("a second keyed limit over the same jobs by another key = %v, want INVALID_ARGUMENT naming limit a", err)
	}
}

// A limit the configuration names is set as the broker starts; a change made at run time lasts
// until the next start, where the configuration's word wins again.
func TestConfiguredRateLimitIsSetAtStart(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.RateLimits = []ratelimit.Rule{{Name: "mail", Type: "mail", Limit: ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 2}}}
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	rate := func() int32 {
		l, err := b.Admin.ListRateLimits(context.Background(), &jobwirev1.ListRateLimitsRequest{})
		if err != nil || len(l.GetLimits()) != 1 {
			t.Fatalf("ListRateLimits = %v, %v; want the configured limit", l, err)
		}
		return l.GetLimits()[0].GetLimit().GetRate()
	}
	if r := rate(); r != 2 {
		t.Fatalf("configured rate %d, want 2", r)
	}
	setRateLimit(t, b, &jobwirev1.RateLimit{Name: "mail", Type: "mail", Rate: 5, Interval: durationpb.New(time.Second)})
	if r := rate(); r != 5 {
		t.Fatalf("rate after a change %d, want 5", r)
	}
	b.Restart()
	if r := rate(); r != 2 {
		t.Fatalf("rate after a restart %d, want the configured 2", r)
	}
}
