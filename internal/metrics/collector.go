package metrics

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
)

// Source is what the scrape-time gauges read from the broker.
type Source interface {
	ListQueues(ctx context.Context, name string) ([]broker.QueueStats, error)
	Breakers() []breaker.Info
	WorkerTotals() (streams, free int)
	// Leader reports whether this broker runs the maintenance that must run once (alone, or
	// as its cluster's leader).
	Leader() bool
}

// RetryCounts is the storage retry policy's counters (a *storeretry.Policy).
type RetryCounts interface {
	Counters() map[string]int64
	Exhausted() map[string]int64
}

// scrapeTimeout bounds the storage read a scrape makes.
const scrapeTimeout = 5 * time.Second

var (
	descQueueJobs = prometheus.NewDesc("jobwire_queue_jobs",
		"Jobs in a queue by state: ready (PENDING), scheduled, running (LEASED or RUNNING), dead.", []string{"queue", "state"}, nil)
	descOldestReady = prometheus.NewDesc("jobwire_queue_oldest_ready_age_seconds",
		"Age of the oldest ready job of a queue (0 when none is ready).", []string{"queue"}, nil)
	descQueuePaused = prometheus.NewDesc("jobwire_queue_paused",
		"1 when the queue is paused.", []string{"queue"}, nil)
	descLeader = prometheus.NewDesc("jobwire_leader",
		"1 when this broker runs the maintenance that must run once: it is alone, or it leads the brokers of its database.", nil, nil)
	descWorkers = prometheus.NewDesc("jobwire_workers_connected",
		"Connected worker streams.", nil, nil)
	descFreeSlots = prometheus.NewDesc("jobwire_worker_free_slots",
		"Jobs the connected, non-draining workers could take right now.", nil, nil)
	descBreakerState = prometheus.NewDesc("jobwire_breaker_state",
		"1 for the state a job type's circuit breaker is in, 0 for the others.", []string{"job_type", "state"}, nil)
	descStorageRetries = prometheus.NewDesc("jobwire_storage_retries_total",
		"Storage operations re-run after a transient failure, by the error code that caused it.", []string{"cause"}, nil)
	descStorageExhausted = prometheus.NewDesc("jobwire_storage_retries_exhausted_total",
		"Storage operations that still failed after their last retry, by the last error code.", []string{"cause"}, nil)
	descScrapeErrors = prometheus.NewDesc("jobwire_scrape_errors_total",
		"Scrapes whose read of queue state failed (the queue gauges are missing from those).", nil, nil)
)

// depthStates are the queue_jobs states and the job states each one sums.
var depthStates = []struct {
	name   string
	states []job.State
}{
	{"ready", []job.State{job.StatePending}},
	{"scheduled", []job.State{job.StateScheduled}},
	{"running", []job.State{job.StateLeased, job.StateRunning}},
	{"dead", []job.State{job.StateDead}},
}

var breakerStates = []breaker.State{breaker.StateClosed, breaker.StateOpen, breaker.StateHalfOpen}

// collector reads the broker's state when Prometheus scrapes.
type collector struct {
	m       *Metrics
	src     Source
	retries RetryCounts
	clk     clock.Clock
	log     *slog.Logger
	errors  atomic.Int64 // failed reads of queue state
}

// Watch registers the scrape-time gauges read from src and, when retries is not nil, the
// storage retry counters.
func (m *Metrics) Watch(src Source, retries RetryCounts, clk clock.Clock, log *slog.Logger) {
	if clk == nil {
		clk = clock.Real{}
	}
	if log == nil {
		log = slog.Default()
	}
	m.reg.MustRegister(&collector{m: m, src: src, retries: retries, clk: clk, log: log})
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueJobs, descOldestReady, descQueuePaused, descWorkers, descFreeSlots, descLeader,
		descBreakerState, descStorageRetries, descStorageExhausted, descScrapeErrors,
		descRateAllowance, descRateKeysLimited, descRateRate} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if queues, err := c.src.ListQueues(ctx, ""); err != nil {
		c.log.Warn("metrics: read queues", "err", err)
		c.errors.Add(1)
	} else {
		c.queues(ch, queues)
	}
	c.rateLimits(ctx, ch)
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.CounterValue, float64(c.errors.Load()))

	streams, free := c.src.WorkerTotals()
	ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(streams))
	ch <- prometheus.MustNewConstMetric(descFreeSlots, prometheus.GaugeValue, float64(free))
	leader := 0.0
	if c.src.Leader() {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)

	// Types folded into Other report the worst state among them: 1 for a state means at least
	// one of them is in it.
	states := map[string]map[breaker.State]bool{}
	for _, b := range c.src.Breakers() {
		t := c.m.foldType(b.Type)
		if states[t] == nil {
			states[t] = map[breaker.State]bool{}
		}
		states[t][b.State] = true
	}
	for t, in := range states {
		for _, s := range breakerStates {
			ch <- prometheus.MustNewConstMetric(descBreakerState, prometheus.GaugeValue, boolValue(in[s]), t, s.String())
		}
	}

	if c.retries != nil {
		for code, n := range c.retries.Counters() {
			ch <- prometheus.MustNewConstMetric(descStorageRetries, prometheus.CounterValue, float64(n), code)
		}
		for code, n := range c.retries.Exhausted() {
			ch <- prometheus.MustNewConstMetric(descStorageExhausted, prometheus.CounterValue, float64(n), code)
		}
	}
}

// queues emits the per-queue gauges, summing the queues folded into Other.
func (c *collector) queues(ch chan<- prometheus.Metric, queues []broker.QueueStats) {
	type agg struct {
		depth  [4]int64
		oldest time.Duration
		paused bool
	}
	now := c.clk.Now()
	byName := map[string]*agg{}
	var order []string
	for _, q := range queues {
		name := c.m.foldQueue(q.Name)
		a := byName[name]
		if a == nil {
			a = &agg{}
			byName[name] = a
			order = append(order, name)
		}
		for i, d := range depthStates {
			for _, s := range d.states {
				a.depth[i] += q.Depth[s]
			}
		}
		if !q.OldestReadyAt.IsZero() {
			a.oldest = max(a.oldest, now.Sub(q.OldestReadyAt))
		}
		a.paused = a.paused || q.Paused
	}
	for _, name := range order {
		a := byName[name]
		for i, d := range depthStates {
			ch <- prometheus.MustNewConstMetric(descQueueJobs, prometheus.GaugeValue, float64(a.depth[i]), name, d.name)
		}
		ch <- prometheus.MustNewConstMetric(descOldestReady, prometheus.GaugeValue, a.oldest.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descQueuePaused, prometheus.GaugeValue, boolValue(a.paused), name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
