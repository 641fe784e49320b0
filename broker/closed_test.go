package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// A job whose Started has not arrived when its stream ends may be running on the worker all
// the same: the Started was on its way, or lost with the stream. These tests show when the end
// of a stream hands such a job back at once (only when it provably never started) and when its
// lease is kept for the worker to adopt (Hello.Held) or to expire.

// refOf is the lease an assignment hands out.
func refOf(a Assignment) job.LeaseRef { return job.LeaseRef{JobID: a.Job.ID, Token: a.Token} }

// wantJob fails unless job id is in state, under lease ref if ref is not zero, with attempts
// attempts.
func wantJob(t *testing.T, b *Broker, id int64, state job.State, ref job.LeaseRef, attempts int) {
	t.Helper()
	j, err := b.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != state || (!ref.Token.IsZero() && j.LeaseToken != ref.Token) || j.Attempts != attempts {
		t.Fatalf("job %d: %s under lease %s with %d attempts; want %s under %s with %d", id, j.State, j.LeaseToken,
			j.Attempts, state, ref.Token, attempts)
	}
}

// barrier waits until b has committed everything submitted before it.
func barrier(t *testing.T, b *Broker) {
	t.Helper()
	for range 2 {
		if err := b.do(context.Background(), "barrier", func(store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// Alone: the job whose Assignment was sent keeps its lease when the stream breaks, and the worker
// that reconnects adopts it and reports it, its one attempt counted; the job whose Assignment
// still waited in the outbox goes back at once. A job sent to a worker that never comes back
// returns after its lease, with no attempt spent.
func TestClosedStreamKeepsTheLeasesOfJobsSent(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}, {Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	sent := assignments(t, s, 2) // taken by the stream's send loop: they may have arrived
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the third job to wait in the outbox", func() bool { return assigned(s) == 1 })
	waiting := pendingMessages(s)[0].(Assignment)
	s.Close()
	barrier(t, b)
	for _, a := range sent {
		wantJob(t, b, a.Job.ID, job.StateLeased, refOf(a), 0)
	}
	wantJob(t, b, waiting.Job.ID, job.StatePending, job.LeaseRef{}, 0)

	// The worker comes back holding the first job (the second it never got).
	s2, w, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1, Held: []job.LeaseRef{refOf(sent[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Lost) != 0 {
		t.Fatalf("welcome lists %v lost, want the lease of a job sent before the stream ended adopted", w.Lost)
	}
	report(t, s2, sent[0], nil)
	wantJob(t, b, sent[0].Job.ID, job.StateSucceeded, job.LeaseRef{}, 1)
	s2.HalfClosed() // leaving no worker to take the job whose lease runs out
	s2.Close()

	b.clk.(interface{ Advance(time.Duration) }).Advance(b.cfg.LeaseDuration)
	b.Sweep()
	wantJob(t, b, sent[1].Job.ID, job.StatePending, job.LeaseRef{}, 0)
}

// A worker that half-closes its stream has had every Started it sent read: what did not start
// never will, and goes back at once.
func TestHalfClosedStreamHandsBackJobsNeverStarted(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	a := assignments(t, s, 1)[0]
	s.HalfClosed()
	s.Close()
	barrier(t, b)
	wantJob(t, b, a.Job.ID, job.StatePending, job.LeaseRef{}, 0)
}

// A worker moved to another broker keeps the jobs sent to it whose Started had not arrived: the
// other broker adopts their leases, and no other worker is handed them meanwhile.
func TestMovedWorkerKeepsTheJobsSentToIt(t *testing.T) {
	c := newCluster(t, 2, DefaultConfig(), breaker.DefaultConfig(), listening)
	m0, m1 := openWorker(t, c, 0, "m0", true), openWorker(t, c, 0, "m1", true)
	c.enqueue(t, 0, 2)
	sent := map[*Session]Assignment{m0: assignments(t, m0, 1)[0], m1: assignments(t, m1, 1)[0]}
	waitCounts(t, c, 2, 0)
	moved := moveOne(t, c, 0, m0, m1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := moved.Next(ctx); !errors.Is(err, ErrMoved) {
		t.Fatalf("the moved stream ends with %v, want ErrMoved", err)
	}
	moved.Close() // as the transport does once the stream ended
	barrier(t, c.brokers[0])
	a := sent[moved]
	wantJob(t, c.brokers[0], a.Job.ID, job.StateLeased, refOf(a), 0)

	s, w, err := c.brokers[1].Open(ctx, Hello{WorkerID: moved.workerID, Types: []string{payType}, Capacity: 1,
		Movable: true, Held: []job.LeaseRef{refOf(a)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(w.Lost) != 0 {
		t.Fatalf("the moved worker's lease is listed lost on the other broker: %v", w.Lost)
	}
	report(t, s, a, nil)
	wantJob(t, c.brokers[1], a.Job.ID, job.StateSucceeded, job.LeaseRef{}, 1)
}

// A worker that reconnected to another broker, and adopted there a job whose Started its first
// broker never read, keeps it when that first broker sees the old stream end only afterwards (it
// was frozen, or the connection's end reached it late): the first broker does not hand the job
// back under the worker, and the result reported to the second is stored, its attempt counted
// once.
func TestStreamEndingLateDoesNotTakeBackAnAdoptedLease(t *testing.T) {
	c := newCluster(t, 2, DefaultConfig(), breaker.DefaultConfig(), listening)
	old := openWorker(t, c, 0, "w", true)
	c.enqueue(t, 0, 1)
	a := assignments(t, old, 1)[0]

	ctx := context.Background()
	s, w, err := c.brokers[1].Open(ctx, Hello{WorkerID: "w", Types: []string{payType}, Capacity: 1,
		Movable: true, Held: []job.LeaseRef{refOf(a)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(w.Lost) != 0 {
		t.Fatalf("the lease is listed lost on the second broker: %v", w.Lost)
	}
	old.Close()
	barrier(t, c.brokers[0])
	wantJob(t, c.brokers[0], a.Job.ID, job.StateLeased, refOf(a), 0)
	report(t, s, a, nil)
	wantJob(t, c.brokers[1], a.Job.ID, job.StateSucceeded, job.LeaseRef{}, 1)
}

// A broker of several that shuts down hands back only the jobs whose Assignment never left it;
// one sent to a worker that has not said Started keeps its lease, for the worker to adopt on
// another broker.
func TestClusterShutdownKeepsTheLeasesOfJobsSent(t *testing.T) {
	c := newCluster(t, 2, DefaultConfig(), breaker.DefaultConfig(), listening)
	s, _, err := c.brokers[0].Open(context.Background(), Hello{WorkerID: "w", Types: []string{payType}, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c.enqueue(t, 0, 1)
	a := assignments(t, s, 1)[0]
	c.enqueue(t, 0, 1)
	waitUntil(t, "the second job to wait in the outbox", func() bool { return assigned(s) == 1 })
	waiting := pendingMessages(s)[0].(Assignment)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.brokers[0].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wantJob(t, c.brokers[1], a.Job.ID, job.StateLeased, refOf(a), 0)
	wantJob(t, c.brokers[1], waiting.Job.ID, job.StatePending, job.LeaseRef{}, 0)
}
