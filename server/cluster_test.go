package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store"
)

// noPoll is a dispatch poll the tests never reach on the fake clock: whatever a broker does, an
// event made it do.
const noPoll = 1000 * time.Hour

// twoBrokers starts broker a, waits until it leads, and starts b on its database; both listen.
func twoBrokers(t *testing.T) (a, b *brokertest.Bundle) {
	t.Helper()
	a = brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll})
	a.WaitLeader()
	b = brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll})
	a.WaitListening(2)
	return a, b
}

// runJob enqueues a job of type "t" through a and has w, a worker of any broker, start it.
func runJob(t *testing.T, a *brokertest.Bundle, w *brokertest.RawWorker) (int64, *jobwirev1.Assignment) {
	t.Helper()
	id := a.Enqueue(spec("t"))
	got := w.Assignment()
	if got.GetJob().GetId() != id {
		t.Fatalf("the worker got job %d, want %d", got.GetJob().GetId(), id)
	}
	w.Started(got)
	a.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	return id, got
}

func spec(typ string) *jobwirev1.JobSpec {
	return &jobwirev1.JobSpec{Type: typ, Payload: []byte(`{}`)}
}

// A job enqueued through one broker is started by an idle worker connected to another at once:
// the enqueue's commit notifies the other broker. Neither broker's dispatch poll runs (the fake
// clock never reaches it), so only the notification can have woken it.
func TestClusterJobEnqueuedOnOneBrokerStartsOnAnother(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := a.Enqueue(spec("t"))
	got := w.Assignment()
	if got.GetJob().GetId() != id {
		t.Fatalf("the worker on the second broker got job %d, want %d", got.GetJob().GetId(), id)
	}
	w.Started(got)
	ack(t, w.Succeed(got))
	a.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
}

// A worker whose stream broke reconnects to another broker with the lease it holds: that broker
// adopts it from the database, and the result it then sends is accepted.
func TestClusterWorkerKeepsItsLeaseOnAnotherBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := a.Connect(brokertest.Hello("w1", 1, "t"))
	id, got := runJob(t, a, w)
	w.Kill()

	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(got)}
	w2 := b.Connect(hello)
	if lost := w2.Welcome.GetLost(); len(lost) != 0 {
		t.Fatalf("the second broker lists %v lost, want the running lease adopted", lost)
	}
	ack(t, w2.Succeed(got))
	j := a.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	if n := j.GetAttempts(); n != 1 {
		t.Fatalf("job after the result through another broker: %d attempts, want 1", n)
	}

	// The same result sent again, to the broker it was first meant for, is answered as stored,
	// and a reconnect that still lists the lease does not call it lost.
	w3 := a.Connect(hello)
	if lost := w3.Welcome.GetLost(); len(lost) != 0 {
		t.Fatalf("after its result was stored the lease is listed lost: %v", lost)
	}
	ack(t, w3.Succeed(got))
}

// A lease that is no longer current is refused by whichever broker receives its token: another
// worker holds the job through the other broker under a newer token.
func TestClusterStaleTokenIsRefusedByEveryBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w1 := a.Connect(brokertest.Hello("w1", 1, "t"))
	id := a.Enqueue(spec("t"))
	old := w1.Assignment()
	w1.HalfClose() // never started, and the worker is done: the lease goes back, and the job to the next worker

	w2 := b.Connect(brokertest.Hello("w2", 1, "t"))
	cur := w2.Assignment()
	if cur.GetJob().GetId() != id || cur.GetLeaseToken() == old.GetLeaseToken() {
		t.Fatalf("second lease: job %d token %s, want job %d under a new token", cur.GetJob().GetId(), cur.GetLeaseToken(), id)
	}
	for name, bundle := range map[string]*brokertest.Bundle{"first": a, "second": b} {
		hello := brokertest.Hello("w1", 1, "t")
		hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(old)}
		w := bundle.Connect(hello)
		if lost := w.Welcome.GetLost(); len(lost) != 1 {
			t.Fatalf("%s broker: a stale lease is not listed lost: %v", name, lost)
		}
		if r := w.Succeed(old).GetRefused(); r == nil || codes.Code(r.GetCode()) != codes.FailedPrecondition {
			t.Fatalf("%s broker: a result under a stale token got %v, want it refused as stale", name, r)
		}
		w.Kill()
	}
	w2.Started(cur)
	ack(t, w2.Succeed(cur))
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
}

// A broker that restarts, or stops, hands back none of the other brokers' leases: a job leased
// and one running through the first broker keep their leases in the database.
func TestClusterRestartKeepsOtherBrokersLeases(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := a.Connect(brokertest.Hello("w1", 2, "t"))
	running := a.Enqueue(spec("t"))
	leased := a.Enqueue(spec("t"))
	first, second := w.Assignment(), w.Assignment()
	if first.GetJob().GetId() != running {
		first, second = second, first
	}
	w.Started(first)
	a.WaitState(running, jobwirev1.JobState_JOB_STATE_RUNNING)
	before := map[int64]string{running: storedLease(t, a, running), leased: storedLease(t, a, leased)}

	b.Restart()
	b.Stop()
	for id, lease := range before {
		if after := storedLease(t, a, id); after != lease {
			t.Fatalf("job %d after another broker restarted and stopped: %s, was %s", id, after, lease)
		}
	}
	ack(t, w.Succeed(first))
	w.Started(second)
	ack(t, w.Succeed(second))
}

// When the leader stops, another broker leads and runs the maintenance: it promotes a job
// scheduled through the old leader, and ends the lease of a worker that went silent on it,
// whose job then reaches a worker on the new leader.
func TestClusterLeaderFailoverRunsMaintenance(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	if b.Broker.Leader() {
		t.Fatal("two brokers lead")
	}
	silent := a.Connect(brokertest.Hello("silent", 1, "t"))
	expiring, _ := runJob(t, a, silent)
	scheduled := a.Enqueue(&jobwirev1.JobSpec{Type: "t", Payload: []byte(`{}`),
		Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(10 * time.Second)}})

	// The leader goes; its worker is cut off with it and never comes back.
	a.Stop()
	b.WaitLeader()
	w := b.Connect(brokertest.Hello("w2", 2, "t"))
	b.Clock.Advance(10 * time.Second) // the scheduled job is due, the silent worker's lease is not over
	got := w.Assignment()
	if got.GetJob().GetId() != scheduled {
		t.Fatalf("after failover the new leader handed out job %d, want the scheduled job %d", got.GetJob().GetId(), scheduled)
	}
	// The silent worker's lease runs out (it was taken 10s ago); the new one's has time left.
	b.Advance(brokertest.DefaultConfig().LeaseDuration - 10*time.Second)
	waitNotState(t, b, expiring, jobwirev1.JobState_JOB_STATE_RUNNING)
	b.Clock.Advance(5 * time.Second) // its retry's backoff (3s and up to 1s of jitter)
	again := w.Assignment()
	if again.GetJob().GetId() != expiring {
		t.Fatalf("after its lease expired the new leader handed out job %d, want %d", again.GetJob().GetId(), expiring)
	}
	if again.GetAttempt() != 2 {
		t.Fatalf("the expired job's next attempt is %d, want 2", again.GetAttempt())
	}
}

// A broker that does not lead learns that the leader ended one of its leases: its worker is told
// to stop, and the job goes on elsewhere.
func TestClusterNonLeaderDropsALeaseTheLeaderExpired(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id, got := runJob(t, a, w)
	a.Advance(brokertest.DefaultConfig().LeaseDuration + brokertest.DefaultConfig().SweepInterval)
	waitNotState(t, a, id, jobwirev1.JobState_JOB_STATE_RUNNING)
	b.Advance(brokertest.DefaultConfig().SweepInterval) // the non-leader's own sweep
	m := w.Next()
	if c := m.GetCancel(); c == nil || c.GetJobId() != id || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST {
		t.Fatalf("worker of an expired lease got %v, want a cancel for lease lost", m)
	}
	// Reconnecting to either broker with it, the worker hears it is lost: the attempt was ended
	// by the sweep, not by a result.
	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(got)}
	for _, bundle := range []*brokertest.Bundle{a, b} {
		if lost := bundle.Connect(hello).Welcome.GetLost(); len(lost) != 1 {
			t.Fatalf("an expired lease is not listed lost: %v", lost)
		}
	}
}

// waitNotState polls the job until it leaves state.
func waitNotState(t *testing.T, b *brokertest.Bundle, id int64, state jobwirev1.JobState) {
	t.Helper()
	brokertest.WaitFor(t, "the job to leave its state", func() bool { return getJob(t, b, id).GetState() != state })
}

// A job cancelled through one broker while a worker of another runs it: that worker is told to
// stop at once.
func TestClusterCancelReachesTheWorkerOnAnotherBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id, _ := runJob(t, a, w)
	if _, err := a.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	m := w.Next()
	if c := m.GetCancel(); c == nil || c.GetJobId() != id || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_REQUESTED {
		t.Fatalf("worker of a job cancelled through another broker got %v, want a cancel", m)
	}
}

// A job delayed through a broker that does not lead is promoted on time by the leader, whose
// timer the enqueue's notification set, and reaches a worker of the first broker.
func TestClusterLeaderPromotesAJobDelayedThroughAnotherBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := b.Enqueue(&jobwirev1.JobSpec{Type: "t", Payload: []byte(`{}`),
		Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(10 * time.Second)}})
	a.Clock.Advance(10 * time.Second)
	if got := w.Assignment(); got.GetJob().GetId() != id {
		t.Fatalf("the worker got job %d, want the delayed job %d", got.GetJob().GetId(), id)
	}
}

// A broker that does not lead keeps a lease its worker heartbeats, however long the job runs:
// only a lease past the deadline its heartbeats set is taken for one the leader ended.
func TestClusterNonLeaderKeepsAHeartbeatedLease(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id, got := runJob(t, a, w)
	lease := brokertest.DefaultConfig().LeaseDuration
	for range 3 {
		b.Clock.Advance(lease * 2 / 3)
		if m := w.Heartbeat(brokertest.Ref(got)); m.GetHeartbeatAck() == nil {
			t.Fatalf("heartbeat answered %v", m)
		}
		a.Advance(brokertest.DefaultConfig().SweepInterval) // the leader's sweep
		b.Advance(brokertest.DefaultConfig().SweepInterval) // and the non-leader's
	}
	ack(t, w.Succeed(got))
	a.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
}

// A job whose notification never came (stored here without one) is still found by the other
// broker's dispatch poll.
func TestClusterPollFindsAJobWithoutNotification(t *testing.T) {
	t.Parallel()
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: time.Second})
	a.WaitListening(2)
	// Once the worker has a first job, the round that leased it is over and saw no more.
	w := b.Connect(brokertest.Hello("w1", 2, "t"))
	first := a.Enqueue(spec("t"))
	if got := w.Assignment(); got.GetJob().GetId() != first {
		t.Fatalf("the worker got %v", got)
	}
	now := a.Clock.Now()
	err := a.Store.Write(context.Background(), "test", func(tx store.Tx) error {
		_, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(time.Second)
	if got := w.Assignment(); got.GetJob().GetId() == first {
		t.Fatalf("the worker got %v again", got)
	}
}
