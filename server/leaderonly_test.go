package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// maintenance counts, for one broker, the writes that must run on the leader only: promoting
// scheduled jobs, the sweep of expired leases and attempt timeouts, retention. It counts the
// statements themselves, inside the broker's transactions, so a batch that carries one of
// them among other operations is counted too.
type maintenance struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *maintenance) add(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[what]++
}

func (m *maintenance) get(what string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[what]
}

func (m *maintenance) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.n)
}

// The three leader-only writes, by what they call.
const (
	opPromote   = "promote"
	opSweep     = "sweep"
	opRetention = "retention"
)

var leaderOnly = []string{opPromote, opSweep, opRetention}

// wrap makes a store that counts the broker's leader-only writes in m.
func (m *maintenance) wrap(s store.Store) store.Store { return countingStore{Store: s, m: m} }

type countingStore struct {
	store.Store
	m *maintenance
}

func (s countingStore) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(countingTx{Tx: tx, m: s.m}) })
}

type countingTx struct {
	store.Tx
	m *maintenance
}

func (t countingTx) JobPromoteScheduled(now time.Time) (int, error) {
	t.m.add(opPromote)
	return t.Tx.JobPromoteScheduled(now)
}

func (t countingTx) JobHeldExpired(now time.Time, limit int) ([]*job.Job, error) {
	t.m.add(opSweep)
	return t.Tx.JobHeldExpired(now, limit)
}

func (t countingTx) JobDeleteFinished(p *store.JobDeleteFinishedParams) (int, error) {
	t.m.add(opRetention)
	return t.Tx.JobDeleteFinished(p)
}

// Of three brokers on one database, only the leader promotes scheduled jobs, sweeps expired
// leases and applies retention, whether its timers fire or the sweep is called; the others
// never run those writes. Every broker's timers fire on the shared fake clock, round after
// round; the rounds go on after the leader's first ones, so that a broker that ran them
// without leading would have counted by the end.
func TestClusterOnlyTheLeaderRunsMaintenance(t *testing.T) {
	t.Parallel()
	counts := []*maintenance{{}, {}, {}}
	a := brokertest.New(t, brokertest.Options{Cluster: true, WrapStore: counts[0].wrap})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, WrapStore: counts[1].wrap})
	c := brokertest.New(t, brokertest.Options{Join: a, WrapStore: counts[2].wrap})
	a.WaitListening(3)
	bundles := []*brokertest.Bundle{a, b, c}
	for i, x := range bundles[1:] {
		if x.Broker.Leader() {
			t.Fatalf("broker %d leads beside the first", i+1)
		}
	}

	interval := brokertest.DefaultConfig().Retention.Interval // the longest of the three timers
	const rounds = 3
	for round := 1; round <= rounds; round++ {
		for _, x := range bundles {
			x.Broker.Sweep() // a direct call is guarded too
		}
		// Every broker's sweep, poll and retention timers fire. A duty arms its timer again
		// only once its write has committed, which can come after the count (taken inside the
		// write) that ended the round before: the clock then moved before that timer was
		// armed, so it is advanced again while the round waits.
		a.Clock.Advance(interval)
		advanced := time.Now()
		brokertest.WaitFor(t, "the leader's duties to run this round", func() bool {
			for _, what := range leaderOnly {
				if counts[0].get(what) < round {
					if time.Since(advanced) > 100*time.Millisecond {
						a.Clock.Advance(interval)
						advanced = time.Now()
					}
					return false
				}
			}
			return true
		})
	}
	for i, m := range counts[1:] {
		for _, what := range leaderOnly {
			if n := m.get(what); n != 0 {
				t.Errorf("broker %d, not the leader, ran %s %d times (counts %v); the leader's: %v",
					i+1, what, n, m, counts[0])
			}
		}
	}
}
