package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/internal/metrics"
	"github.com/jobwire/jobwire/internal/web"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/storeretry"
	"github.com/jobwire/jobwire/worker"
)

// testBundle is a broker with metrics, its HTTP listener and a worker.
type testBundle struct {
	b      *brokertest.Bundle
	m      *metrics.Metrics
	scrape func() scrape
}

type setupOpts struct {
	metrics metrics.Options
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	m := metrics.New(o.metrics)
	grpcm := metrics.NewGRPC()
	m.Registry().MustRegister(grpcm)
	b := brokertest.New(t, brokertest.Options{Observer: m, ServerOptions: []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpcm.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(grpcm.StreamServerInterceptor()),
	}, RequestInterceptors: []grpc.UnaryServerInterceptor{grpcm.UnaryServerInterceptor()}})
	m.Watch(b.Broker, nil, b.Clock, nil)
	srv := httptest.NewServer(web.Handler(web.Options{Metrics: m.Handler(), Ready: b.Broker.Ready}))
	t.Cleanup(srv.Close)
	tb := &testBundle{b: b, m: m}
	tb.scrape = func() scrape {
		t.Helper()
		return scrapeURL(t, srv.URL+"/metrics")
	}
	return tb
}

// scrapeURL reads and parses the metrics served at url.
func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return scrape{t: t, fams: fams}
}

// scrape is one parsed /metrics answer.
type scrape struct {
	t    *testing.T
	fams map[string]*dto.MetricFamily
}

// value returns the sample of name whose labels include every pair of labels ("k=v"), or
// -1 when there is none. Histograms give their sample count.
func (s scrape) value(name string, labels ...string) float64 {
	f := s.fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// series counts the samples of name.
func (s scrape) series(name string) int {
	if f := s.fams[name]; f != nil {
		return len(f.GetMetric())
	}
	return 0
}

func runWorker(t *testing.T, b *brokertest.Bundle, register func(w *worker.Worker)) {
	t.Helper()
	w, err := worker.New(b.Conn, worker.Options{ID: "metrics-worker", Concurrency: 8, ShutdownGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFor checks cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A scripted workload: N jobs succeed, M fail once transiently and then succeed, K fail
// fatally. The scrape shows exactly those counts.
func TestScrapeCountsScriptedWorkload(t *testing.T) {
	t.Parallel()
	const n, m, k = 7, 4, 3 // plus one ok job enqueued twice with one key
	tb := setup(t, setupOpts{})
	b := tb.b
	runWorker(t, b, func(w *worker.Worker) {
		w.Handle("ok", func(context.Context, *worker.Job) error { return nil })
		w.Handle("flaky", func(_ context.Context, j *worker.Job) error {
			if j.Attempt == 1 {
				return errors.New("upstream timed out")
			}
			return nil
		})
		w.Handle("broken", func(context.Context, *worker.Job) error {
			return worker.Fatal(errors.New("payload has no recipient"))
		})
	})
	for i := range n - 1 {
		b.Enqueue(&jobwirev1.JobSpec{Type: "ok", Queue: "mail", Payload: fmt.Appendf(nil, "%d", i)})
	}
	for range m {
		b.Enqueue(&jobwirev1.JobSpec{Type: "flaky", Queue: "mail"})
	}
	for range k {
		b.Enqueue(&jobwirev1.JobSpec{Type: "broken", Queue: "mail"})
	}
	// A repeat of an idempotency key stores nothing new and is not counted.
	b.Enqueue(&jobwirev1.JobSpec{Type: "ok", Queue: "mail", IdempotencyKey: "once"})
	b.Enqueue(&jobwirev1.JobSpec{Type: "ok", Queue: "mail", IdempotencyKey: "once"})
	waitFor(t, "first attempts to end", func() bool {
		s := tb.scrape()
		return s.value("jobwire_jobs_succeeded_total", "job_type=ok") == n &&
			s.value("jobwire_jobs_retried_total", "job_type=flaky") == m &&
			s.value("jobwire_jobs_dead_total", "job_type=broken", "reason=FATAL") == k
	})
	// Nothing runs now: the flaky jobs wait out their backoff, which this makes due.
	b.Advance(time.Hour)
	waitFor(t, "the retries to succeed", func() bool {
		return tb.scrape().value("jobwire_jobs_succeeded_total", "job_type=flaky") == m
	})
	s := tb.scrape()
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"jobwire_jobs_enqueued_total", []string{"queue=mail", "job_type=ok"}, n},
		{"jobwire_jobs_enqueued_total", []string{"queue=mail", "job_type=flaky"}, m},
		{"jobwire_jobs_enqueued_total", []string{"queue=mail", "job_type=broken"}, k},
		{"jobwire_jobs_started_total", []string{"job_type=ok"}, n},
		{"jobwire_jobs_started_total", []string{"job_type=flaky"}, 2 * m},
		{"jobwire_jobs_started_total", []string{"job_type=broken"}, k},
		{"jobwire_jobs_succeeded_total", []string{"job_type=ok"}, n},
		{"jobwire_jobs_succeeded_total", []string{"job_type=flaky"}, m},
		{"jobwire_jobs_succeeded_total", []string{"job_type=broken"}, 0},
		{"jobwire_jobs_failed_total", []string{"job_type=flaky", "kind=transient"}, m},
		{"jobwire_jobs_failed_total", []string{"job_type=flaky", "kind=fatal"}, 0},
		{"jobwire_jobs_failed_total", []string{"job_type=broken", "kind=fatal"}, k},
		{"jobwire_jobs_failed_total", []string{"job_type=ok", "kind=transient"}, 0},
		{"jobwire_jobs_retried_total", []string{"job_type=flaky"}, m},
		{"jobwire_jobs_retried_total", []string{"job_type=broken"}, 0},
		{"jobwire_jobs_dead_total", []string{"job_type=broken", "reason=FATAL"}, k},
		{"jobwire_jobs_dead_total", []string{"job_type=flaky", "reason=MAX_ATTEMPTS_EXHAUSTED"}, 0},
		{"jobwire_jobs_cancelled_total", []string{"job_type=ok"}, 0},
		{"jobwire_attempt_duration_seconds", []string{"job_type=ok"}, n},
		{"jobwire_attempt_duration_seconds", []string{"job_type=flaky"}, 2 * m},
		{"jobwire_job_wait_seconds", []string{"queue=mail"}, n + 2*m + k},
		{"jobwire_queue_jobs", []string{"queue=mail", "state=dead"}, k},
		{"jobwire_queue_jobs", []string{"queue=mail", "state=ready"}, 0},
		{"jobwire_queue_jobs", []string{"queue=mail", "state=running"}, 0},
		{"jobwire_workers_connected", nil, 1},
		{"jobwire_worker_free_slots", nil, 8},
		{"jobwire_leader", nil, 1}, // alone, it runs the maintenance itself
		{"grpc_server_handled_total", []string{"grpc_method=Enqueue", "grpc_code=OK"}, n + m + k + 1},
	}
	for _, w := range want {
		if got := s.value(w.name, w.labels...); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	if s.value("jobwire_storage_commit_batch_size") <= 0 || s.value("jobwire_storage_commit_duration_seconds") <= 0 {
		t.Error("no storage commits observed")
	}
}

// A cancelled job, a breaker forced open and reset, and a paused queue show up as counts and
// gauges.
// Each request of an enqueue stream is counted as the Enqueue call it stands for, with its
// own status; the stream is counted once, as a stream.
func TestScrapeCountsStreamRequestsAsEnqueueCalls(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{})
	c, err := client.Dial(t.Context(), tb.b.Addr, client.WithEnqueueStreams(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 5 {
		if _, err := c.Enqueue(t.Context(), "ok", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Enqueue(t.Context(), "", nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Enqueue without a type: %v, want INVALID_ARGUMENT", err)
	}
	s := tb.scrape()
	for _, w := range []struct {
		labels []string
		value  float64
	}{
		{[]string{"grpc_method=Enqueue", "grpc_code=OK"}, 5},
		{[]string{"grpc_method=Enqueue", "grpc_code=InvalidArgument"}, 1},
	} {
		if got := s.value("grpc_server_handled_total", w.labels...); got != w.value {
			t.Errorf("grpc_server_handled_total%v = %v, want %v", w.labels, got, w.value)
		}
	}
	if got := s.value("grpc_server_started_total", "grpc_method=EnqueueStream"); got != 1 {
		t.Errorf("grpc_server_started_total{EnqueueStream} = %v, want 1 stream", got)
	}
}

func TestScrapeCancelBreakerAndQueueGauges(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{})
	b := tb.b
	ctx := context.Background()
	id := b.Enqueue(&jobwirev1.JobSpec{Type: "later", Queue: "slow", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}})
	b.Enqueue(&jobwirev1.JobSpec{Type: "later", Queue: "slow"})
	if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "slow"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "later", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(10 * time.Second)
	s := tb.scrape()
	checks := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"jobwire_jobs_cancelled_total", []string{"queue=slow", "job_type=later"}, 1},
		{"jobwire_queue_paused", []string{"queue=slow"}, 1},
		{"jobwire_queue_jobs", []string{"queue=slow", "state=ready"}, 1},
		{"jobwire_queue_jobs", []string{"queue=slow", "state=scheduled"}, 0},
		{"jobwire_queue_oldest_ready_age_seconds", []string{"queue=slow"}, 10},
		{"jobwire_breaker_state", []string{"job_type=later", "state=OPEN"}, 1},
		{"jobwire_breaker_state", []string{"job_type=later", "state=CLOSED"}, 0},
		{"jobwire_breaker_transitions_total", []string{"job_type=later", "from=CLOSED", "to=OPEN", "reason=forced"}, 1},
		{"jobwire_workers_connected", nil, 0},
	}
	for _, c := range checks {
		if got := s.value(c.name, c.labels...); got != c.value {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.value)
		}
	}
}

// Queue and job type names past the bounds are counted under "other", so the series stay
// bounded whatever producers send.
func TestScrapeFoldsNamesPastTheBound(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{metrics: metrics.Options{MaxQueues: 2, MaxTypes: 3}})
	for i := range 10 {
		tb.b.Enqueue(&jobwirev1.JobSpec{Type: fmt.Sprintf("type-%d", i), Queue: fmt.Sprintf("queue-%d", i)})
	}
	s := tb.scrape()
	// queue-0/type-0, queue-1/type-1, other/type-2, then other/other.
	if got := s.series("jobwire_jobs_enqueued_total"); got != 4 {
		t.Errorf("jobs_enqueued_total has %d series, want 4", got)
	}
	total := 0.0
	for _, m := range s.fams["jobwire_jobs_enqueued_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	if total != 10 {
		t.Errorf("enqueued over all series = %v, want 10", total)
	}
	if got := s.value("jobwire_jobs_enqueued_total", "queue=other", "job_type=other"); got != 7 {
		t.Errorf("enqueued{queue=other,job_type=other} = %v, want 7", got)
	}
	if got := s.value("jobwire_queue_jobs", "queue=other", "state=ready"); got != 8 {
		t.Errorf("queue_jobs{queue=other,state=ready} = %v, want 8 (every queue past the first two)", got)
	}
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{})
	srv := httptest.NewServer(web.Handler(web.Options{Ready: tb.b.Broker.Ready}))
	defer srv.Close()
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d", got)
	}
	if got := get("/readyz"); got != http.StatusOK {
		t.Errorf("/readyz = %d before shutdown", got)
	}
	if got := get("/metrics"); got != http.StatusNotFound {
		t.Errorf("/metrics = %d with metrics off, want 404", got)
	}
	tb.b.Stop()
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d after shutdown, want 503", got)
	}
}

// A lease that runs out while its job runs counts as a lease expiry and a failed attempt of
// kind lease_expired.
func TestScrapeCountsLeaseExpiries(t *testing.T) {
	t.Parallel()
	tb := setup(t, setupOpts{})
	b := tb.b
	w := b.Connect(brokertest.Hello("silent-1", 1, "t"))
	id := b.Enqueue(&jobwirev1.JobSpec{Type: "t", Queue: "q"})
	a := w.Assignment()
	w.Started(a)
	// Counted as started once the broker hears Started; the sweep below must find it stored
	// as running (a start may ride a later commit), or the expiry only hands the lease back.
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	waitFor(t, "the attempt to start", func() bool {
		return tb.scrape().value("jobwire_jobs_started_total", "queue=q") == 1
	})
	b.Advance(brokertest.DefaultConfig().LeaseDuration + time.Second) // the worker went silent
	s := tb.scrape()
	for _, c := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"jobwire_lease_expiries_total", []string{"queue=q"}, 1},
		{"jobwire_jobs_failed_total", []string{"queue=q", "kind=lease_expired"}, 1},
		{"jobwire_jobs_retried_total", []string{"queue=q"}, 1},
	} {
		if got := s.value(c.name, c.labels...); got != c.value {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.value)
		}
	}
}

// Storage retries and exhausted retries come from the storage retry policy, by cause.
func TestScrapeShowsStorageRetries(t *testing.T) {
	t.Parallel()
	busy := errors.New("database is locked")
	policy, err := storeretry.New(storeretry.Config{
		Options:  storeretry.Options{MaxTransientRetries: 2, CommandTimeout: time.Second},
		Classify: func(err error) (string, bool) { return "SQLITE_BUSY", errors.Is(err, busy) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// One operation succeeds on its second try; another never does.
	tries := 0
	_ = policy.Do(context.Background(), "flaky", func(context.Context) error {
		if tries++; tries == 1 {
			return busy
		}
		return nil
	})
	_ = policy.Do(context.Background(), "stuck", func(context.Context) error { return busy })

	m := metrics.New(metrics.Options{})
	b := brokertest.New(t, brokertest.Options{Observer: m})
	m.Watch(b.Broker, policy, b.Clock, nil)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	s := scrapeURL(t, srv.URL)
	if got := s.value("jobwire_storage_retries_total", "cause=SQLITE_BUSY"); got != 3 {
		t.Errorf("storage_retries_total = %v, want 3 (one, then two before giving up)", got)
	}
	if got := s.value("jobwire_storage_retries_exhausted_total", "cause=SQLITE_BUSY"); got != 1 {
		t.Errorf("storage_retries_exhausted_total = %v, want 1", got)
	}
}

// A PostgreSQL store's connection pool is scraped: its size, the connections in use, the takes,
// and the waits for a connection that their caller gave up.
func TestScrapeShowsThePostgresPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{Logger: slog.New(slog.DiscardHandler), MaxConns: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := metrics.New(metrics.Options{})
	m.WatchPool(st)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	before := scrapeURL(t, srv.URL)
	if got := before.value("jobwire_db_pool_max_connections"); got != 3 {
		t.Errorf("db_pool_max_connections = %v, want 3", got)
	}

	// Three writes that wait inside their transaction hold every connection.
	release := make(chan struct{})
	var writes sync.WaitGroup
	for range 3 {
		writes.Go(func() {
			if err := st.Write(ctx, "hold", func(store.Tx) error { <-release; return nil }); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "three writes to hold every connection", func() bool { return st.PoolStats().InUse == 3 })
	during := scrapeURL(t, srv.URL)
	if got := during.value("jobwire_db_pool_connections", "state=in_use"); got != 3 {
		t.Errorf("db_pool_connections{in_use} = %v with every connection held, want 3", got)
	}
	// A read finds none and gives up waiting.
	readCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = st.JobCounts(readCtx)
	cancel()
	if err == nil {
		t.Fatal("a read with every connection held and a 50ms deadline succeeded")
	}
	close(release)
	writes.Wait()

	after := scrapeURL(t, srv.URL)
	if got := after.value("jobwire_db_pool_acquires_canceled_total"); got < 1 {
		t.Errorf("db_pool_acquires_canceled_total = %v after a read gave up waiting, want at least 1", got)
	}
	if a, b := after.value("jobwire_db_pool_acquires_total"), before.value("jobwire_db_pool_acquires_total"); a < b+3 {
		t.Errorf("db_pool_acquires_total went from %v to %v over three writes", b, a)
	}
	// Opening a connection is a wait too: the three writes found the pool short of one.
	if got := after.value("jobwire_db_pool_acquire_waits_total"); got < 1 {
		t.Errorf("db_pool_acquire_waits_total = %v, want at least 1", got)
	}
	if got := after.value("jobwire_db_pool_connections", "state=in_use"); got != 0 {
		t.Errorf("db_pool_connections{in_use} = %v once the writes are done, want 0", got)
	}
}
