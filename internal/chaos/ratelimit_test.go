package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/worker"
)

// envRateFor runs TestRateLimitHoldsAcrossThreeBrokers for this long (a Go duration, such as
// 60s, for a measurement); unset, for defaultRateFor.
const envRateFor = "JOBWIRE_RATELIMIT_FOR"

// defaultRateFor is the run of TestRateLimitHoldsAcrossThreeBrokers in every test run: it
// measures in real time, and 5 s (250 starts at 50/s) keeps it at about 10 s with the brokers'
// start, while a broker that ignored the shared limit would lease hundreds at once.
const defaultRateFor = 5 * time.Second

// Rate limit under measure: 50 starts a second, bursts of 10, declared in the configuration
// file every broker reads.
const (
	measuredRate  = 50
	measuredBurst = 10
	measuredType  = "rl.call"
)

// measuredLease is the brokers' lease_duration (brokerConfig): an assignment's lease deadline
// less it is the moment, on the broker's clock, that the lease took the job's allowance.
const measuredLease = 2 * time.Second

// A rate limit of 50/s holds across three brokers on one PostgreSQL database, with workers free
// on every broker (each with room for 100 jobs, so only the limit holds jobs back) and more
// jobs waiting than the limit lets through. Each job's allowance is taken as it is leased, at the
// moment its assignment's lease deadline gives (less the lease duration): over the run those
// moments may not exceed what the token bucket allows in any window, burst + rate × window,
// checked for every window between two leases with no tolerance, and their number must reach
// 90% of rate × duration in a measured minute, 60% in the default 5 s (usedFloor): the limit
// is used, not only respected; on a quiet machine it reaches 98%, and a machine loaded many
// times over its cores delays the rounds that take the refills.
// It prints the leases per second and per broker.
func TestRateLimitHoldsAcrossThreeBrokers(t *testing.T) { rateAcrossThreeBrokers(t, false) }

// usedFloor is the share of rate × time a run of runFor must lease: 90% for a measurement of a
// minute, 60% for the 5 s of every test run, where a round stalled by a loaded machine (-race,
// the other packages' tests) costs a whole second's share (one such run leased 30 in its
// second second, 88% in all; with the concurrency rule too, on a machine loaded beyond the
// suite's own work, one leased 62%). 60% still fails a limit held at half its rate, or a third
// per broker.
func usedFloor(runFor time.Duration) float64 {
	if runFor >= 30*time.Second {
		return 0.90
	}
	return 0.60
}

// measuredCustomers is how many customers' jobs the keyed run spreads its jobs over, one
// running at a time each: fewer than the burst, so that the burst alone would run two of a
// customer at once were the key not applied, and enough that the key does not hold the run
// under the rate: with 4, each customer's job had to be leased, run and stored within 80 ms
// for 50 a second, and on a loaded machine (two CPU hogs beside the race-enabled test) the
// run made 55-80% of the rate.
const measuredCustomers = 8

// The same with a concurrency rule over the same jobs, one running job per customer: the rate
// limit holds as above, every handler of a customer runs alone (a handler runs while its job is
// held, so two at once would mean two held), and every customer's jobs start.
func TestRateLimitAndConcurrencyKeyHoldAcrossThreeBrokers(t *testing.T) {
	rateAcrossThreeBrokers(t, true)
}

// rateAcrossThreeBrokers is TestRateLimitHoldsAcrossThreeBrokers, with the jobs keyed by
// customer (measuredCustomers, one running each) when keyed.
func rateAcrossThreeBrokers(t *testing.T, keyed bool) {
	runFor := defaultRateFor
	if d := os.Getenv(envRateFor); d != "" {
		var err error
		if runFor, err = time.ParseDuration(d); err != nil || runFor < time.Second {
			t.Fatalf("%s=%q: want a duration of a second or more, such as 60s", envRateFor, d)
		}
	}
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, 3, db, dir)
	config := brokerConfig + fmt.Sprintf(`rate_limits:
  - {name: api, type: %s, rate: %d, interval: 1s, burst: %d}
`, measuredType, measuredRate, measuredBurst)
	if keyed {
		config += fmt.Sprintf(`concurrency:
  - {name: per-customer, type: %s, key: payload.customer, max_running: 1}
`, measuredType)
	}
	if err := os.WriteFile(brokers.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), runFor+2*time.Minute)
	defer cancel()

	// Enqueue more than the limit lets through in the run, before any worker connects.
	producer, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	total := int(runFor.Seconds()*measuredRate*1.3) + 200
	for from := 0; from < total; from += 500 {
		specs := make([]client.JobSpec, min(500, total-from))
		for i := range specs {
			payload := []byte(`{}`)
			if keyed {
				payload = fmt.Appendf(nil, `{"customer": "c%d"}`, (from+i)%measuredCustomers)
			}
			specs[i] = client.NewJobSpec(measuredType, payload)
		}
		if _, err := producer.EnqueueBatch(ctx, specs); err != nil {
			t.Fatal(err)
		}
	}

	// One worker per broker, each connected to that broker alone, with room for 100.
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	leases := &leaseLog{}
	customers := &runningKeys{}
	for i, addr := range brokers.addrs {
		conn, err := client.Dial(ctx, addr, client.WithDialOptions(grpc.WithChainStreamInterceptor(onReceive(leases.record))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		w, err := worker.New(conn.Conn(), worker.Options{ID: fmt.Sprintf("broker-%d", i), Concurrency: 100, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle(measuredType, func(_ context.Context, j *worker.Job) error {
			if keyed {
				customers.run(string(j.Payload))
			}
			return nil
		})
		wg.Go(func() { _ = w.Run(workCtx) })
	}
	time.Sleep(runFor) // the measure is of real time: the run lasts as long as asked
	stopWork()
	wg.Wait()

	_, byWorker := readStarts(ctx, t, db)
	starts := leases.sorted()
	if len(starts) == 0 {
		t.Fatal("no job leased")
	}
	first := starts[0]
	in := slices.DeleteFunc(slices.Clone(starts), func(s time.Time) bool { return s.Sub(first) >= runFor })
	emission := time.Second / measuredRate
	worst, worstAt := 0.0, time.Duration(0)
	for i := range in {
		for j := i; j < len(in); j++ {
			allowed := measuredBurst + int(in[j].Sub(in[i])/emission)
			if n := j - i + 1; n > allowed {
				t.Fatalf("%d leases within %s (from %s), the limit allows %d", n, in[j].Sub(in[i]), in[i].Sub(first), allowed)
			}
		}
	}
	perSecond := make([]int, int(runFor/time.Second))
	for _, s := range in {
		if k := int(s.Sub(first) / time.Second); k < len(perSecond) {
			perSecond[k]++
		}
	}
	for k, n := range perSecond {
		if over := float64(n) - measuredRate; over > worst {
			worst, worstAt = over, time.Duration(k)*time.Second
		}
	}
	want := runFor.Seconds() * measuredRate
	t.Logf("rate limit %d/s burst %d across 3 brokers for %s: %d leases (%.1f%% of rate × time, at most %d allowed); per second %v; worst second %+.0f at %s; started per worker %v",
		measuredRate, measuredBurst, runFor, len(in), 100*float64(len(in))/want, measuredBurst+int(want), perSecond, worst, worstAt, byWorker)
	if floor := usedFloor(runFor); float64(len(in)) < floor*want {
		t.Fatalf("%d leases in %s: under %.0f%% of the %d/s the limit allows", len(in), runFor, 100*floor, measuredRate)
	}
	for i, n := range byWorker {
		if n == 0 {
			t.Errorf("the worker of broker %s started nothing: the brokers did not share the limit", i)
		}
	}
	if keyed {
		customers.mu.Lock()
		defer customers.mu.Unlock()
		t.Logf("concurrency per customer 1: most running at once %d; started per customer %v", customers.most, customers.started)
		if customers.most > 1 {
			t.Fatalf("%d handlers of one customer ran at once, the rule allows 1", customers.most)
		}
		if len(customers.started) != measuredCustomers {
			t.Fatalf("jobs of %d customers started, want all %d: some starved", len(customers.started), measuredCustomers)
		}
	}
}

// runningKeys counts the handlers running per customer (by payload), and the most of one at once.
type runningKeys struct {
	mu      sync.Mutex
	running map[string]int
	started map[string]int
	most    int
}

// run counts a handler of customer running for a moment, long enough for another of the same
// customer, were it let through, to overlap it.
func (r *runningKeys) run(customer string) {
	r.mu.Lock()
	if r.running == nil {
		r.running, r.started = map[string]int{}, map[string]int{}
	}
	r.running[customer]++
	r.started[customer]++
	r.most = max(r.most, r.running[customer])
	r.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // a handler's work; the check is of overlap, not of timing
	r.mu.Lock()
	r.running[customer]--
	r.mu.Unlock()
}

// readStarts reads when each job of the measured type started, in order, as the brokers stored
// it, and how many started on each worker.
func readStarts(ctx context.Context, t *testing.T, db string) ([]time.Time, map[string]int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A job's start is its first attempt's: the jobs succeed at once, so each ran once.
	rows, err := conn.Query(ctx, `SELECT started_at, worker_id FROM jobs
		WHERE type = $1 AND started_at IS NOT NULL ORDER BY started_at`, measuredType)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	byWorker := map[string]int{}
	for rows.Next() {
		var at int64
		var w string
		if err := rows.Scan(&at, &w); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Unix(0, at))
		byWorker[strings.TrimSpace(w)]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, byWorker
}

// leaseLog records the moment each assignment's lease was taken, from the assignments the
// workers receive.
type leaseLog struct {
	mu sync.Mutex
	at map[int64]time.Time // by job: a job assigned again keeps its first lease
}

func (l *leaseLog) record(m *jobwirev1.ConnectResponse) {
	a := m.GetAssignment()
	if a == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[int64]time.Time{}
	}
	if _, seen := l.at[a.GetJob().GetId()]; !seen {
		l.at[a.GetJob().GetId()] = a.GetLeaseDeadline().AsTime().Add(-measuredLease)
	}
}

// sorted is every lease's moment, earliest first.
func (l *leaseLog) sorted() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Time, 0, len(l.at))
	for _, t := range l.at {
		out = append(out, t)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}
