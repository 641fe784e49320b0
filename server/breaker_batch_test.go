package server_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/jobwire/jobwire/breaker"
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
	// locks and saves count the breakers locked (BreakerLock) and saved without their lock
	// (BreakerSaveIf).
	locks, saves atomic.Int64
}

func (s *successCount) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(&successCountTx{Tx: tx, s: s}) })
}

type successCountTx struct {
	store.Tx
	s *successCount
}

func (tx *successCountTx) BreakerLock(typ string, initial []byte) ([]byte, error) {
	tx.s.locks.Add(1)
	return tx.Tx.BreakerLock(typ, initial)
}

func (tx *successCountTx) BreakerSaveIf(r store.BreakerRecord, stored []byte, succeeded []job.LeaseRef) error {
	tx.s.saves.Add(1)
	return tx.Tx.BreakerSaveIf(r, stored, succeeded)
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

// countingCluster starts a broker of a cluster on group commit (whatever JOBWIRE_TEST_COMMIT
// says: the reference writer writes each op alone) whose writes counted counts.
func countingCluster(t *testing.T) (b *brokertest.Bundle, counted *successCount) {
	t.Helper()
	counted = &successCount{}
	b = brokertest.New(t, brokertest.Options{Cluster: true, Commit: brokertest.GroupCommit(), WrapStore: func(st store.Store) store.Store {
		counted.Store = st
		return counted
	}})
	return b, counted
}

// On PostgreSQL a cluster's breakers live in the database, and the default breaker (ratio
// mode) counts every success: its successes still go through the batch statement
// (JobSucceedMany), which a group commit gives all of a batch's successes, and are counted in
// their breaker's window, not written by a statement of their own each (JobFinish, which cost a
// drain two thirds of its rate). How many share a statement depends on how the results arrive,
// so the test counts the statement used, not the batches.
func TestClusterSuccessesCountedInTheBreakerAreStoredTogether(t *testing.T) {
	t.Parallel()
	b, counted := countingCluster(t)
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

// A lone success counted in its type's breaker (a producer enqueuing one job at a time) does
// not lock the breaker once the writer has stored it: the writer saves it if still stored as
// it left it, in the commit. When another broker (here a write beside the broker) changed it
// since, the save fails the transaction, which runs again with the lock: the calls the other
// wrote are kept, and each success counted once.
func TestClusterBreakerSavedWithoutItsLockCountsExactly(t *testing.T) {
	t.Parallel()
	b, counted := countingCluster(t)
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	succeed := func() {
		t.Helper()
		b.Enqueue(&jobwirev1.JobSpec{Type: flaky})
		a := w.Assignment()
		w.Started(a)
		w.Send(brokertest.SuccessMsg(brokertest.Ref(a), nil))
		for w.Next().GetResultAck() == nil {
		}
	}
	succeed()
	locks := counted.locks.Load()
	const lone = 5
	for range lone {
		succeed()
	}
	if n, saves := counted.locks.Load()-locks, counted.saves.Load(); n != 0 || saves < lone {
		t.Fatalf("%d lone successes locked the breaker %d times and saved it without the lock %d times, want 0 and %d or more",
			lone, n, saves, lone)
	}
	// Another writer adds 7 calls to the breaker's window.
	const others = 7
	ctx := context.Background()
	if err := counted.Store.Write(ctx, "other", func(tx store.Tx) error {
		data, err := tx.BreakerLock(flaky, nil)
		if err != nil {
			return err
		}
		var saved breaker.Saved
		if err := json.Unmarshal(data, &saved); err != nil {
			return err
		}
		saved.Window[len(saved.Window)-1].Calls += others
		data, err = json.Marshal(saved)
		if err != nil {
			return err
		}
		return tx.BreakerSave(store.BreakerRecord{Type: flaky, Data: data})
	}); err != nil {
		t.Fatal(err)
	}
	retried := b.Store.StorageRetries()["40001"]
	locks = counted.locks.Load()
	succeed()
	if n := b.Store.StorageRetries()["40001"] - retried; n != 1 {
		t.Fatalf("the save of a breaker changed since was retried %d times, want once", n)
	}
	if n := counted.locks.Load() - locks; n != 1 {
		t.Fatalf("the success's write run again locked the breaker %d times, want once", n)
	}
	if br := breakerOf(t, b, flaky); br.GetCallsInWindow() != 1+lone+others+1 || br.GetFailuresInWindow() != 0 {
		t.Fatalf("the breaker counted %d calls, %d failed; want %d and 0", br.GetCallsInWindow(), br.GetFailuresInWindow(), 1+lone+others+1)
	}
}
