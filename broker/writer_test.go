package broker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// A broker of a cluster, whose jobs the other brokers' writers write too, has each batch lock
// the jobs it writes first, in id order (commit.Config.LockJobs); a broker alone on its
// database is its jobs' only writer and spends nothing on it.
func TestWriterLocksJobsFirstOnlyInACluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		clustered bool
		want      [][]int64
	}{
		{name: "alone", clustered: false, want: nil},
		{name: "cluster", clustered: true, want: [][]int64{{1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pst, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			spy := &lockSpy{Store: pst}
			var cl store.Cluster
			if tc.clustered {
				cl = pst
			}
			b, err := New(Options{Store: spy, Commit: testCommit, Cluster: cl, Config: DefaultConfig(),
				Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			startForTest(t, b, pst.Close)
			o := &jobsOp{funcOp: funcOp{name: "test", apply: func(store.Tx) error { return nil }}, ids: []int64{2, 1, 2}}
			if err := b.doOp(ctx, o); err != nil {
				t.Fatal(err)
			}
			if got := spy.locked(); !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("JobLockRows calls %v, want %v", got, tc.want)
			}
		})
	}
}

// jobsOp is a write of the jobs ids (commit.JobWriter) that writes nothing.
type jobsOp struct {
	funcOp
	ids []int64
}

func (o *jobsOp) WritesJobs() []int64 { return o.ids }

// lockSpy is a store that records the ids of every JobLockRows of its transactions.
type lockSpy struct {
	store.Store
	mu    sync.Mutex
	calls [][]int64
}

func (s *lockSpy) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(lockSpyTx{tx, s}) })
}

func (s *lockSpy) locked() [][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

type lockSpyTx struct {
	store.Tx
	s *lockSpy
}

func (tx lockSpyTx) JobLockRows(ids []int64) error {
	tx.s.mu.Lock()
	tx.s.calls = append(tx.s.calls, slices.Clone(ids))
	tx.s.mu.Unlock()
	return tx.Tx.JobLockRows(ids)
}
