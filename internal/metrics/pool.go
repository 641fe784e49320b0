package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwire/jobwire/store"
)

// Pool is a store with a pool of database connections (the PostgreSQL store).
type Pool interface {
	PoolStats() store.PoolStats
}

var (
	descPoolConns = prometheus.NewDesc("jobwire_db_pool_connections",
		"Connections of the database pool by state: in_use, idle, constructing.", []string{"state"}, nil)
	descPoolMax = prometheus.NewDesc("jobwire_db_pool_max_connections",
		"The most connections the database pool may open (pool_max_conns).", nil, nil)
	descPoolAcquires = prometheus.NewDesc("jobwire_db_pool_acquires_total",
		"Connections taken from the database pool.", nil, nil)
	descPoolEmptyAcquires = prometheus.NewDesc("jobwire_db_pool_acquire_waits_total",
		"Connections taken from the database pool that found none idle and waited for one.", nil, nil)
	descPoolCanceled = prometheus.NewDesc("jobwire_db_pool_acquires_canceled_total",
		"Waits for a database pool connection that their caller gave up.", nil, nil)
	descPoolWait = prometheus.NewDesc("jobwire_db_pool_acquire_seconds_total",
		"Time the successful takes of a database pool connection took together.", nil, nil)
)

// poolCollector reads a database pool's counters when Prometheus scrapes.
type poolCollector struct{ pool Pool }

// WatchPool registers the gauges and counters of pool's connections.
func (m *Metrics) WatchPool(pool Pool) { m.reg.MustRegister(poolCollector{pool: pool}) }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolConns, descPoolMax, descPoolAcquires, descPoolEmptyAcquires, descPoolCanceled, descPoolWait} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.PoolStats()
	for state, n := range map[string]int32{"in_use": s.InUse, "idle": s.Idle, "constructing": s.Constructing} {
		ch <- prometheus.MustNewConstMetric(descPoolConns, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(descPoolMax, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(descPoolAcquires, prometheus.CounterValue, float64(s.Acquires))
	ch <- prometheus.MustNewConstMetric(descPoolEmptyAcquires, prometheus.CounterValue, float64(s.EmptyAcquires))
	ch <- prometheus.MustNewConstMetric(descPoolCanceled, prometheus.CounterValue, float64(s.CanceledAcquires))
	ch <- prometheus.MustNewConstMetric(descPoolWait, prometheus.CounterValue, s.AcquireWait.Seconds())
}
