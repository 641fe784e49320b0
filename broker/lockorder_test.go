package broker

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// lockRace holds each of two brokers' transactions, once it has taken its first breaker lock,
// until the other has taken its own first one or is about to wait for the one it holds. Two
// transactions that lock two breakers in opposite orders then each hold one and want the
// other's: the database must break a deadlock. In one order, the second waits for the first.
type lockRace struct {
	mu    sync.Mutex
	cond  *sync.Cond
	armed bool
	first [2]string // the breaker each transaction locked first
	wants [2]string // the breaker each is about to lock first
}

func newLockRace() *lockRace {
	r := &lockRace{}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// arm starts a round.
func (r *lockRace) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.first, r.wants = true, [2]string{}, [2]string{}
}

// hook is broker i's Broker.lockingBreaker.
func (r *lockRace) hook(i int) func(typ string, locked bool) {
	return func(typ string, locked bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.armed || r.first[i] != "" {
			return // a later lock, or a retry of the round's transaction
		}
		defer r.cond.Broadcast()
		if !locked {
			r.wants[i] = typ
			return
		}
		r.first[i] = typ
		j := 1 - i
		for r.first[j] == "" && r.wants[j] != typ {
			r.cond.Wait()
		}
	}
}

// failOp is an op that fails the breakers of types in that order, as job jobID's attempt.
func failOp(b *Broker, jobID int64, types ...string) commit.Op {
	var ch breakerChanges
	return &funcOp{name: "fail", apply: func(tx store.Tx) error {
		ch.reset()
		for _, typ := range types {
			if err := b.settleShared(tx, &ch, typ, jobID, 1, breaker.Permit{}, permitFailed, breaker.Transient, ""); err != nil {
				return err
			}
		}
		return nil
	}}
}

// inOneBatch has b's writer write ops in one batch, in that order, and returns their errors.
func inOneBatch(t *testing.T, b *Broker, ops ...commit.Op) func() []error {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- b.do(context.Background(), "block", func(store.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for k, o := range ops {
		wg.Go(func() { errs[k] = b.doOp(context.Background(), o) })
		for b.writing.writer.Queued() < k+1 {
			runtime.Gosched()
		}
	}
	return func() []error {
		close(release)
		if err := <-blocked; err != nil {
			t.Error(err)
		}
		wg.Wait()
		return errs
	}
}

// bothBatches releases the two brokers' batches from inOneBatch at once and fails the test on
// any error of round's ops.
func bothBatches(t *testing.T, round int, batches ...func() []error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([][]error, len(batches))
	for i, release := range batches {
		wg.Go(func() { errs[i] = release() })
	}
	wg.Wait()
	for i, es := range errs {
		for _, err := range es {
			if err != nil {
				t.Fatalf("round %d, broker %d: %v", round, i, err)
			}
		}
	}
}

// lockOrderCluster is two brokers on one database that report their breaker locks to race.
func lockOrderCluster(t *testing.T) (*cluster, *lockRace) {
	t.Helper()
	pgtest.ServerURL(t)
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), listening)
	race := newLockRace()
	for i, b := range c.brokers {
		b.writing.lockingBreaker = race.hook(i)
	}
	return c, race
}

// cappedName is the capped queue the lock-order tests' queue changes and leases lock.
const cappedName = "capped"

// cappedQueue gives c a capped queue, cappedName, holding one job of payType.
func cappedQueue(t *testing.T, c *cluster) {
	t.Helper()
	if _, err := c.brokers[0].Enqueue(context.Background(), []JobSpec{{Type: payType, Queue: cappedName}}); err != nil {
		t.Fatal(err)
	}
	if err := c.brokers[0].SetQueueLimit(context.Background(), cappedName, 5); err != nil {
		t.Fatal(err)
	}
}

// noDeadlocks checks that no broker of c had a transaction aborted as deadlocked (40P01) and
// retried.
func noDeadlocks(t *testing.T, c *cluster) {
	t.Helper()
	for i, st := range c.stores {
		if n := st.StorageRetries()["40P01"]; n != 0 {
			t.Errorf("broker %d retried %d transactions the database aborted as deadlocked (40P01), want none", i, n)
		}
	}
}

// Two brokers' batches that fail the same two types in opposite orders lock their breakers in
// one order (by type): neither ever waits for the other in a cycle, so the database never
// aborts one as a deadlock (40P01) for the storage retries to repeat.
func TestSharedBreakerLockOrder(t *testing.T) {
	t.Parallel()
	c, race := lockOrderCluster(t)
	orders := [2][]string{{"order-a", "order-b"}, {"order-b", "order-a"}}
	const rounds = 5
	for round := range rounds {
		race.arm()
		var wg sync.WaitGroup
		errs := make([]error, len(c.brokers))
		for i, b := range c.brokers {
			jobID := int64(round*len(c.brokers) + i + 1)
			wg.Go(func() { errs[i] = b.doOp(context.Background(), failOp(b, jobID, orders[i]...)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, broker %d: %v", round, i, err)
			}
		}
	}
	noDeadlocks(t, c)
	// Every failure counted: each type's breaker opened, or counts them all.
	infos := make(map[string]breaker.Info)
	for _, in := range c.brokers[0].Breakers() {
		infos[in.Type] = in
	}
	for _, typ := range orders[0] {
		if in := infos[typ]; in.State != breaker.StateOpen && in.FailuresInWindow != 2*rounds {
			t.Errorf("breaker %s after %d failures: %+v", typ, 2*rounds, in)
		}
	}
}

// A batch that locks the capped queues (a queue change, a lease) and fails a type locks the
// type's breaker first, whatever the order of its ops, so it does not deadlock with one that
// does the same in the other order.
func TestSharedBreakerLockedBeforeQueues(t *testing.T) {
	t.Parallel()
	c, race := lockOrderCluster(t)
	cappedQueue(t, c)
	queueOp := func(i int) commit.Op {
		return &funcOp{name: "queue_change", locks: true, apply: func(tx store.Tx) error {
			hook := race.hook(i)
			hook("queue "+cappedName, false)
			if err := tx.QueueSetLimit(cappedName, 5); err != nil {
				return err
			}
			hook("queue "+cappedName, true)
			return nil
		}}
	}
	const rounds = 3
	for round := range rounds {
		race.arm()
		jobID := int64(round*2 + 1)
		bothBatches(t, round,
			inOneBatch(t, c.brokers[0], queueOp(0), failOp(c.brokers[0], jobID, payType)),
			inOneBatch(t, c.brokers[1], failOp(c.brokers[1], jobID+1, payType), queueOp(1)))
	}
	noDeadlocks(t, c)
}

// A dispatch round's lease that locks the capped queues for one grant and a probe's breaker
// for another has the probe's breaker locked with the batch's before the queues, so it does
// not deadlock with a batch that fails the probe's type and then leases from a capped queue.
func TestSharedBreakerProbeLockedBeforeQueues(t *testing.T) {
	t.Parallel()
	c, race := lockOrderCluster(t)
	cappedQueue(t, c)
	// leaseOp stands for a round whose first grant leases from the capped queue and, if
	// probe, whose second is a probe of payType.
	leaseOp := func(i int, b *Broker, probe bool) commit.Op {
		o := &probingOp{funcOp: funcOp{name: "lease", locks: true}}
		var ch breakerChanges
		if probe {
			o.probes = []string{payType}
		}
		o.apply = func(tx store.Tx) error {
			ch.reset()
			hook := race.hook(i)
			hook("queue "+cappedName, false)
			if _, err := tx.JobLease(&store.JobLeaseParams{Types: []string{"nothing"}, Queues: []string{cappedName},
				Limit: 1, EnforceQueues: true}); err != nil {
				return err
			}
			hook("queue "+cappedName, true)
			if !probe {
				return nil
			}
			return b.changeBreaker(tx, &ch, payType, func(*breaker.Shared) error { return nil })
		}
		return o
	}
	const rounds = 3
	for round := range rounds {
		race.arm()
		bothBatches(t, round,
			inOneBatch(t, c.brokers[0], failOp(c.brokers[0], int64(round+1), payType), leaseOp(0, c.brokers[0], false)),
			inOneBatch(t, c.brokers[1], leaseOp(1, c.brokers[1], true)))
	}
	noDeadlocks(t, c)
}

// probingOp is a write that locks queues and whose probes lock their breakers with the batch's
// (prober), as a round's lease does.
type probingOp struct {
	funcOp
	probes []string
}

func (o *probingOp) probeTypes() []string { return o.probes }
