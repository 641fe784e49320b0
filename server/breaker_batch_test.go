package server_test

import (
	"context"
	"sync/atomic"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// successCount is a store that counts how successes are written: one statement each
// (JobFinish) or many to a statement (JobSucceedMany, with COMMIT or not).
type successCount struct {
	store.Store
	alone, grouped atomic.Int64
}

func (s *successCount) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(&successCountTx{Tx: tx, s: s}) })
}

type successCountTx struct {
	store.Tx
	s *successCount
}

func (tx *successCountTx) JobFinish(p *store.JobFinishParams) (bool, error) {
	if p.State == job.StateSucceeded {
		tx.s.alone.Add(1)
	}
	return tx.Tx.JobFinish(p)
}

func (tx *successCountTx) JobSucceedMany(ps []*store.JobFinishParams) ([]bool, error) {
	tx.s.grouped.Add(int64(len(ps)))
	return tx.Tx.JobSucceedMany(ps)
}

func (tx *successCountTx) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	tx.s.grouped.Add(int64(len(ps)))
	return tx.Tx.JobSucceedManyAtCommit(ps, got)
}

// On PostgreSQL a cluster's breakers live in the database, and the default breaker (ratio
// mode) counts every success: its successes still go through the batch statement
// (JobSucceedMany), which a group commit gives all of a batch's successes, and are counted in
// their breaker's window, not written by a statement of their own each (JobFinish, which cost a
// drain two thirds of its rate). How many share a statement depends on how the results arrive,
// so the test counts the statement used, not the batches.
func TestClusterSuccessesCountedInTheBreakerAreStoredTogether(t *testing.T) {
	t.Parallel()
	counted := &successCount{}
	// Group commit, whatever JOBWIRE_TEST_COMMIT says: the reference writer writes each op alone.
	b := brokertest.New(t, brokertest.Options{Cluster: true, Commit: brokertest.GroupCommit(), WrapStore: func(st store.Store) store.Store {
		counted.Store = st
		return counted
	}})
	const jobs = 20
	for range jobs {
		b.Enqueue(&jobwirev1.JobSpec{Type: flaky})
	}
	w := b.Connect(brokertest.Hello("w1", jobs, flaky))
	var leased []*jobwirev1.Assignment
	for range jobs {
		a := w.Assignment()
		w.Started(a)
		leased = append(leased, a)
	}
	for _, a := range leased {
		w.Send(brokertest.SuccessMsg(brokertest.Ref(a), nil))
	}
	for acked := 0; acked < jobs; {
		if w.Next().GetResultAck() != nil {
			acked++
		}
	}
	if alone, grouped := counted.alone.Load(), counted.grouped.Load(); alone != 0 || grouped != jobs {
		t.Fatalf("%d successes written alone and %d together, want 0 and %d", alone, grouped, jobs)
	}
	if br := breakerOf(t, b, flaky); br.GetCallsInWindow() != jobs || br.GetFailuresInWindow() != 0 {
		t.Fatalf("the breaker counted %d calls, %d failed; want %d and 0", br.GetCallsInWindow(), br.GetFailuresInWindow(), jobs)
	}
}
