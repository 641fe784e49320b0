package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"LeaseEnforceQueues", testLeaseEnforceQueues},
	testCase{"LeaseEnforceQueuesInOneWrite", testLeaseEnforceQueuesInOneWrite},
	testCase{"LeaseSkipCapped", testLeaseSkipCapped},
	testCase{"PausedReady", testPausedReady},
)

// insertIn adds n jobs of type "t" to queue, in dispatch order, and returns their ids.
func (b *bundle) insertIn(queue string, n, priority int) []int64 {
	b.t.Helper()
	var ps []*store.JobInsertParams
	for range n {
		p := b.job("t")
		p.Queue, p.Priority = queue, priority
		ps = append(ps, p)
	}
	return b.insert(ps...)
}

// enforcing leases up to limit jobs of type "t" under the queues' rules as the database holds
// them, from queues (none: any queue).
func (b *bundle) enforcing(limit int, queues ...string) *store.JobLeaseParams {
	p := b.leaseParams(limit, "t")
	p.Queues = queues
	p.EnforceQueues = true
	// Neither the caller's room nor its view of the paused queues counts: the database's does.
	p.Caps = map[string]int{"capped": 100}
	return p
}

// With EnforceQueues the database decides: a paused queue is left out even when the lease
// names it, and a capped queue gives jobs only while its LEASED and RUNNING jobs stay under its
// limit, whoever leased them and whenever (a RUNNING job from before a restart counts too).
func testLeaseEnforceQueues(t *testing.T, b *bundle) {
	capped := b.insertIn("capped", 5, 10) // the capped queue's jobs come first
	free := b.insertIn("free", 2, 0)
	paused := b.insertIn("paused", 2, 20)
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetLimit("capped", 3); err != nil {
			return err
		}
		return tx.QueueSetPaused("paused", true)
	})
	jobs := b.lease(b.enforcing(10, "capped", "free", "paused"))
	equal(t, "first lease", ids(jobs), slices.Concat(capped[:3], free))
	running := refOf(jobs[0])
	b.start(running)
	if jobs := b.lease(b.enforcing(10)); len(jobs) != 0 {
		t.Fatalf("leased %v from a full or paused queue", ids(jobs))
	}
	// A RUNNING job holds its place until it ends.
	fp := b.finishParams(running, job.StateSucceeded)
	fp.Queue = "capped"
	b.finish(fp)
	equal(t, "room for one", ids(b.lease(b.enforcing(10))), capped[3:4])
	// Raising the limit makes room; resuming lets the paused queue's jobs through.
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetLimit("capped", 5); err != nil {
			return err
		}
		return tx.QueueSetPaused("paused", false)
	})
	equal(t, "after raise and resume", ids(b.lease(b.enforcing(10))), slices.Concat(paused, capped[4:]))
}

// The leases of one write share the room they count, a lease rolled back gives its room back,
// and a limit changed earlier in the write is the one that counts.
func testLeaseEnforceQueuesInOneWrite(t *testing.T, b *bundle) {
	capped := b.insertIn("capped", 6, 0)
	b.write(func(tx store.Tx) error { return tx.QueueSetLimit("capped", 2) })
	var got [][]int64
	b.write(func(tx store.Tx) error {
		got = nil
		lease := func() error {
			jobs, err := tx.JobLease(b.enforcing(1))
			got = append(got, ids(jobs))
			return err
		}
		// Rolled back: its job is ready again and its room free.
		errUndo := errors.New("undo")
		if err := tx.Isolated(func() error {
			if err := lease(); err != nil {
				return err
			}
			return errUndo
		}); !errors.As(err, new(*store.IsolatedError)) {
			t.Fatalf("isolated lease: %v, want the undo", err)
		}
		for range 3 {
			if err := lease(); err != nil {
				return err
			}
		}
		if err := tx.QueueSetLimit("capped", 3); err != nil {
			return err
		}
		return lease()
	})
	equal(t, "leases in one write", got, [][]int64{capped[:1], capped[:1], capped[1:2], {}, capped[2:3]})
}

// SkipCapped leaves out the jobs of every queue the database marks capped, room or not, as
// well as the paused ones; without it the same lease takes the capped queue's room.
func testLeaseSkipCapped(t *testing.T, b *bundle) {
	capped := b.insertIn("capped", 2, 10)
	free := b.insertIn("free", 2, 0)
	b.insertIn("paused", 1, 20)
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetLimit("capped", 5); err != nil {
			return err
		}
		return tx.QueueSetPaused("paused", true)
	})
	p := b.enforcing(10)
	p.SkipCapped = true
	equal(t, "leased with SkipCapped", ids(b.lease(p)), free)
	equal(t, "leased without it", ids(b.lease(b.enforcing(10))), capped)
}

// PausedReady counts the ready jobs of the paused queues only, up to its bound.
func testPausedReady(t *testing.T, b *bundle) {
	count := func(atMost int) int {
		t.Helper()
		n, err := b.s.PausedReady(b.ctx, atMost)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	b.insertIn("open", 5, 0)
	b.insertIn("held", 7, 0)
	later := b.job("t")
	later.Queue, later.RunAt = "held", b.now.Add(time.Hour) // scheduled, not ready
	b.insert(later)
	equal(t, "ready jobs counted with no queue paused", count(100), 0)
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetPaused("held", true); err != nil {
			return err
		}
		return tx.QueueSetPaused("empty", true)
	})
	equal(t, "ready jobs counted in the paused queues", count(100), 7)
	equal(t, "ready jobs counted up to 5", count(5), 5)
}
