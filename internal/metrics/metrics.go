// Package metrics exports the broker's Prometheus metrics: counters and histograms fed by the
// broker as jobs move (it implements broker.Observer), and gauges read from the broker at
// scrape time (queue depth, workers, breakers, storage retries). docs/metrics.md lists them.
//
// Label values come only from bounded sets. Queue and job type names are admitted first come,
// first served up to Options.MaxQueues and Options.MaxTypes; later names are counted under
// Other, so a producer that invents a type per job cannot grow the series without end.
package metrics

import (
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/triage"
)

// Other is the label value that stands for every queue or job type past the bound.
const Other = "other"

// Default bounds on distinct label values.
const (
	DefaultMaxQueues = 20
	DefaultMaxTypes  = 100
)

// Options configure the metrics.
type Options struct {
	// MaxQueues and MaxTypes bound the distinct queue and job type label values (0: the
	// defaults). Names past the bound are counted under Other.
	MaxQueues, MaxTypes int
	// Version is exported as jobwire_build_info{version}.
	Version string
}

// Buckets of the job latency histograms, in seconds: 5 ms to an hour.
var jobBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Metrics is the broker's metric set on its own registry.
type Metrics struct {
	reg *prometheus.Registry

	enqueued, started, succeeded, retried, cancelled *prometheus.CounterVec
	failed, dead                                     *prometheus.CounterVec
	attemptSeconds, waitSeconds                      *prometheus.HistogramVec
	leaseExpiries                                    *prometheus.CounterVec
	breakerTransitions                               *prometheus.CounterVec
	commitOps, commitSeconds                         prometheus.Histogram
	commitFailures                                   prometheus.Counter

	// The series maps are read on every job without a lock: a writer (under mu) copies the
	// map, adds to the copy and publishes it. They are small and bounded, and writes are rare.
	byJob   atomic.Pointer[map[jobKey]*jobSeries]
	byQueue atomic.Pointer[map[string]*queueSeries]

	mu     sync.Mutex // guards the bounds and the writers of the maps
	queues *bound
	types  *bound
}

// jobKey names one queue and job type, both already folded into their bounds.
type jobKey struct{ queue, jobType string }

// jobSeries holds the resolved children of one queue and job type, so the hot paths do a map
// read and an atomic add, and no label lookup.
type jobSeries struct {
	enqueued, started, succeeded, retried, cancelled prometheus.Counter
	failed                                           [broker.CauseTimeout + 1]prometheus.Counter
	dead                                             [job.DeadTimeout + 1]prometheus.Counter
	attempt                                          prometheus.Observer
}

type queueSeries struct {
	wait          prometheus.Observer
	leaseExpiries prometheus.Counter
}

// New builds the metric set and registers it, with the Go runtime and process collectors, on
// a registry of its own.
func New(opts Options) *Metrics {
	if opts.MaxQueues <= 0 {
		opts.MaxQueues = DefaultMaxQueues
	}
	if opts.MaxTypes <= 0 {
		opts.MaxTypes = DefaultMaxTypes
	}
	qt := []string{"queue", "job_type"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "jobwire", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		reg:       prometheus.NewRegistry(),
		enqueued:  counter("jobs_enqueued_total", "Jobs stored by Enqueue (duplicates of an idempotency key not counted).", qt...),
		started:   counter("jobs_started_total", "Attempts whose user code started.", qt...),
		succeeded: counter("jobs_succeeded_total", "Attempts that succeeded.", qt...),
		failed:    counter("jobs_failed_total", "Attempts that failed, by how (transient, fatal, lease_expired, timeout).", "queue", "job_type", "kind"),
		retried:   counter("jobs_retried_total", "Failed attempts after which the job was scheduled to run again.", qt...),
		dead:      counter("jobs_dead_total", "Jobs moved to the dead-letter queue, by dead reason.", "queue", "job_type", "reason"),
		cancelled: counter("jobs_cancelled_total", "Jobs cancelled before they finished.", qt...),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "jobwire", Name: "attempt_duration_seconds",
			Help: "How long attempts ran, from start to the stored outcome.", Buckets: jobBuckets}, qt),
		waitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "jobwire", Name: "job_wait_seconds",
			Help: "Enqueue-to-start latency: from when a job became ready (its run_at) to when an attempt started.", Buckets: jobBuckets}, []string{"queue"}),
		leaseExpiries: counter("lease_expiries_total", "Leases that ran out before their worker reported.", "queue"),
		breakerTransitions: counter("breaker_transitions_total", "Circuit breaker state changes.",
			"job_type", "from", "to", "reason"),
		commitOps: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "jobwire", Name: "storage_commit_batch_size",
			Help: "Operations committed together in one storage transaction (group commit).", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "jobwire", Name: "storage_commit_duration_seconds",
			Help: "How long one group-commit transaction took, retries included.", Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5}}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "jobwire", Name: "storage_commit_failures_total",
			Help: "Group-commit transactions that failed (their operations were then run one by one)."}),
		queues: newBound(opts.MaxQueues),
		types:  newBound(opts.MaxTypes),
	}
	m.byJob.Store(&map[jobKey]*jobSeries{})
	m.byQueue.Store(&map[string]*queueSeries{})
	m.reg.MustRegister(m.enqueued, m.started, m.succeeded, m.failed, m.retried, m.dead, m.cancelled,
		m.attemptSeconds, m.waitSeconds, m.leaseExpiries, m.breakerTransitions,
		m.commitOps, m.commitSeconds, m.commitFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "jobwire", Name: "build_info",
		Help: "Always 1; the version label names the running build."}, []string{"version"})
	info.WithLabelValues(opts.Version).Set(1)
	m.reg.MustRegister(info)
	return m
}

// Registry is where every metric is registered; callers add their own collectors to it (the
// gRPC server metrics, the scrape-time collector).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// jobs returns the series of a queue and job type, creating them (folded into the bounds)
// the first time.
func (m *Metrics) jobs(queue, jobType string) *jobSeries {
	if s := (*m.byJob.Load())[jobKey{queue, jobType}]; s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Only folded keys are stored, so the map stays within the bounds; a name past them takes
	// this slower path every time.
	k := jobKey{m.queues.fold(queue), m.types.fold(jobType)}
	cur := *m.byJob.Load()
	if s := cur[k]; s != nil {
		return s
	}
	s := &jobSeries{
		enqueued:  m.enqueued.WithLabelValues(k.queue, k.jobType),
		started:   m.started.WithLabelValues(k.queue, k.jobType),
		succeeded: m.succeeded.WithLabelValues(k.queue, k.jobType),
		retried:   m.retried.WithLabelValues(k.queue, k.jobType),
		cancelled: m.cancelled.WithLabelValues(k.queue, k.jobType),
		attempt:   m.attemptSeconds.WithLabelValues(k.queue, k.jobType),
	}
	for c := broker.CauseTransient; c <= broker.CauseTimeout; c++ {
		s.failed[c] = m.failed.WithLabelValues(k.queue, k.jobType, c.String())
	}
	for r := job.DeadFatal; r <= job.DeadTimeout; r++ {
		s.dead[r] = m.dead.WithLabelValues(k.queue, k.jobType, r.String())
	}
	next := maps.Clone(cur)
	next[k] = s
	m.byJob.Store(&next)
	return s
}

func (m *Metrics) queue(name string) *queueSeries {
	if s := (*m.byQueue.Load())[name]; s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	name = m.queues.fold(name)
	cur := *m.byQueue.Load()
	if s := cur[name]; s != nil {
		return s
	}
	s := &queueSeries{wait: m.waitSeconds.WithLabelValues(name), leaseExpiries: m.leaseExpiries.WithLabelValues(name)}
	next := maps.Clone(cur)
	next[name] = s
	m.byQueue.Store(&next)
	return s
}

// The broker.Observer methods.

var _ broker.Observer = (*Metrics)(nil)

// JobEnqueued implements broker.Observer.
func (m *Metrics) JobEnqueued(queue, jobType string) { m.jobs(queue, jobType).enqueued.Inc() }

// AttemptStarted implements broker.Observer.
func (m *Metrics) AttemptStarted(queue, jobType string, wait time.Duration) {
	m.jobs(queue, jobType).started.Inc()
	m.queue(queue).wait.Observe(max(wait, 0).Seconds())
}

// AttemptEnded implements broker.Observer.
func (m *Metrics) AttemptEnded(queue, jobType string, end broker.AttemptEnd) {
	s := m.jobs(queue, jobType)
	if !end.Unstarted {
		s.attempt.Observe(max(end.Duration, 0).Seconds())
		if end.Cause > broker.CauseNone && end.Cause <= broker.CauseTimeout {
			s.failed[end.Cause].Inc()
		}
	}
	switch end.Verdict {
	case triage.Succeeded:
		s.succeeded.Inc()
	case triage.Retry:
		s.retried.Inc()
	case triage.Dead:
		if end.Dead >= job.DeadFatal && end.Dead <= job.DeadTimeout {
			s.dead[end.Dead].Inc()
		}
	}
}

// JobCancelled implements broker.Observer.
func (m *Metrics) JobCancelled(queue, jobType string) { m.jobs(queue, jobType).cancelled.Inc() }

// LeaseExpired implements broker.Observer.
func (m *Metrics) LeaseExpired(queue string) { m.queue(queue).leaseExpiries.Inc() }

// BreakerTransition implements broker.Observer.
func (m *Metrics) BreakerTransition(jobType string, from, to breaker.State, reason breaker.Reason) {
	m.breakerTransitions.WithLabelValues(m.foldType(jobType), from.String(), to.String(), reason.String()).Inc()
}

// BatchCommitted implements broker.Observer.
func (m *Metrics) BatchCommitted(ops int, took time.Duration, err error) {
	m.commitOps.Observe(float64(ops))
	m.commitSeconds.Observe(took.Seconds())
	if err != nil {
		m.commitFailures.Inc()
	}
}

// foldType returns the label value a job type is counted under.
func (m *Metrics) foldType(jobType string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.types.fold(jobType)
}

// foldQueue returns the label value a queue is counted under.
func (m *Metrics) foldQueue(queue string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queues.fold(queue)
}

// bound admits names up to a limit; it is guarded by Metrics.mu.
type bound struct {
	max   int
	names map[string]struct{}
}

func newBound(n int) *bound { return &bound{max: n, names: make(map[string]struct{}, n)} }

// fold returns name if it is admitted (admitting it while there is room), else Other.
func (b *bound) fold(name string) string {
	if _, ok := b.names[name]; ok {
		return name
	}
	if len(b.names) < b.max {
		b.names[name] = struct{}{}
		return name
	}
	return Other
}
