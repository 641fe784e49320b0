package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store"
)

// gateStore holds the broker's first write named op after arm, until let go.
type gateStore struct {
	store.Store
	op      string
	armed   atomic.Bool
	entered chan struct{} // closed as the held write arrives
	release chan struct{} // closed to let it run
}

func (g *gateStore) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	if op == g.op && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.Write(ctx, op, fn)
}

// A worker that comes back, listing a lease whose job its closed stream is handing back, is
// told the lease is lost: the hand back ends it whatever the worker says, and the job may be
// leased to another worker before that write's answer reaches this broker. (Adopting it made
// the worker hold a lease the database no longer grants, seen across two brokers.)
func TestLeaseBeingHandedBackIsLostToAReturningWorker(t *testing.T) {
	t.Parallel()
	gate := &gateStore{op: "release", entered: make(chan struct{}), release: make(chan struct{})}
	b := brokertest.New(t, brokertest.Options{WrapStore: func(s store.Store) store.Store {
		gate.Store = s
		return gate
	}})
	w1 := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := b.Enqueue(spec("t"))
	old := w1.Assignment()
	gate.armed.Store(true)
	w1.HalfClose() // never started: its job goes back
	select {
	case <-gate.entered:
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the hand back was not written alone, as a write named \"release\"")
	}

	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(old)}
	again := b.Connect(hello)
	close(gate.release)
	if lost := again.Welcome.GetLost(); len(lost) != 1 || lost[0].GetJobId() != id {
		t.Fatalf("a lease being handed back: lost %v, want job %d", lost, id)
	}
	cur := again.Assignment()
	if cur.GetJob().GetId() != id || cur.GetLeaseToken() == old.GetLeaseToken() {
		t.Fatalf("after the hand back: job %d token %s, want job %d under a new token", cur.GetJob().GetId(), cur.GetLeaseToken(), id)
	}
	again.Started(cur)
	ack(t, again.Succeed(cur))
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
}
