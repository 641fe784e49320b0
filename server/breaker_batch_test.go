package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// heldFor is how long a broker of a cluster holds the successes its ratio-mode breakers count
// before a write of their own stores them (broker's breakerSaveDelay).
const heldFor = time.Second

// breakerWrites is how many times the counted store locked a breaker or saved one without its
// lock.
func (s *successCount) breakerWrites() int64 { return s.locks.Load() + s.saves.Load() }

// succeedAll leases n jobs of type flaky to w, which starts them all, then succeeds them all,
// and waits for every acknowledgement.
func succeedAll(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, n int) {
	t.Helper()
	var leased []*jobwirev1.Assignment
	for range n {
		a := w.Assignment()
		w.Started(a)
		leased = append(leased, a)
	}
	for _, a := range leased {
		w.Send(brokertest.SuccessMsg(brokertest.Ref(a), nil))
	}
	for acked := 0; acked < n; {
		if w.Next().GetResultAck() != nil {
			acked++
		}
	}
}

// succeedJobs enqueues n jobs of type flaky, and succeeds them through a worker that takes
// them all (succeedAll); it returns the breaker writes counted before the successes.
func succeedJobs(t *testing.T, b *brokertest.Bundle, counted *successCount, n int) (writes int64) {
	t.Helper()
	for range n {
		b.Enqueue(&jobwirev1.JobSpec{Type: flaky})
	}
	w := b.Connect(brokertest.Hello("w1", int32(n), flaky))
	writes = counted.breakerWrites()
	succeedAll(t, b, w, n)
	return writes
}

// callsAre waits until the stored breaker of type flaky counts n calls, none failed.
func callsAre(t *testing.T, b *brokertest.Bundle, n int32) {
	t.Helper()
	waitBreaker(t, b, flaky, fmt.Sprintf("%d calls, none failed", n), func(br *jobwirev1.BreakerInfo) bool {
		if br.GetCallsInWindow() > n {
			t.Fatalf("the breaker counts %d calls, more than the %d successes", br.GetCallsInWindow(), n)
		}
		return br.GetCallsInWindow() == n && br.GetFailuresInWindow() == 0
	})
}

// On PostgreSQL a cluster's breakers live in the database, and the default breaker (ratio
// mode) counts every success. The successes go through the batch statement (JobSucceedMany),
// not a statement of their own each (JobFinish, which cost a drain two thirds of its rate),
// and write nothing to the breaker: they are held, and stored together by one write within
// heldFor. How many share a statement depends on how the results arrive, so the test counts
// the statement used, not the batches.
func TestClusterSuccessesAreHeldForTheirBreaker(t *testing.T) {
	t.Parallel()
	b, counted := countingCluster(t)
	const jobs = 20
	writes := succeedJobs(t, b, counted, jobs)
	if alone, grouped := counted.alone.Load(), counted.grouped.Load(); alone != 0 || grouped != jobs {
		t.Fatalf("%d successes written alone and %d together, want 0 and %d", alone, grouped, jobs)
	}
	if n := counted.breakerWrites() - writes; n != 0 {
		t.Fatalf("%d successes wrote their breaker %d times, want none before %v", jobs, n, heldFor)
	}
	b.Clock.Advance(heldFor)
	callsAre(t, b, jobs)
	if n := counted.breakerWrites() - writes; n != 1 {
		t.Fatalf("the held successes were stored by %d breaker writes, want 1", n)
	}
}

// A broker that stops in order stores the successes it holds: the next one finds them.
func TestClusterHeldSuccessesAreStoredAtShutdown(t *testing.T) {
	t.Parallel()
	b, counted := countingCluster(t)
	const jobs = 5
	succeedJobs(t, b, counted, jobs)
	b.Restart()
	if br := breakerOf(t, b, flaky); br.GetCallsInWindow() != jobs || br.GetFailuresInWindow() != 0 {
		t.Fatalf("after a restart the breaker counts %d calls, %d failed; want the %d successes held at the stop",
			br.GetCallsInWindow(), br.GetFailuresInWindow(), jobs)
	}
}

// The held successes of a type the writer has stored are saved without the breaker's lock, if
// still stored as it left it, in the commit. When another broker (here a write beside the
// broker) changed it since, the save fails the transaction, which runs again with the lock:
// the calls the other wrote are kept, and each success counted once.
func TestClusterBreakerSavedWithoutItsLockCountsExactly(t *testing.T) {
	t.Parallel()
	b, counted := countingCluster(t)
	w := b.Connect(brokertest.Hello("w1", 1, flaky))
	succeed := func(n int) {
		t.Helper()
		for range n {
			b.Enqueue(&jobwirev1.JobSpec{Type: flaky})
			succeedAll(t, b, w, 1)
		}
		b.Clock.Advance(heldFor)
	}
	succeed(1)
	callsAre(t, b, 1)
	locks, saves := counted.locks.Load(), counted.saves.Load()
	const lone = 5
	succeed(lone)
	callsAre(t, b, 1+lone)
	if n, saved := counted.locks.Load()-locks, counted.saves.Load()-saves; n != 0 || saved != 1 {
		t.Fatalf("storing %d held successes locked the breaker %d times and saved it without the lock %d times, want 0 and 1",
			lone, n, saved)
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
	succeed(1)
	callsAre(t, b, 1+lone+others+1)
	if n := b.Store.StorageRetries()["40001"] - retried; n != 1 {
		t.Fatalf("the save of a breaker changed since was retried %d times, want once", n)
	}
	if n := counted.locks.Load() - locks; n != 1 {
		t.Fatalf("the held success's write run again locked the breaker %d times, want once", n)
	}
}
