package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// idleType is a job type of which no job is waiting, its breaker HALF_OPEN.
const idleType = "idle"

// breakerInfo is b's listing of typ's breaker; ok is false if b lists none.
func breakerInfo(b *Broker, typ string) (breaker.Info, bool) {
	for _, in := range b.Breakers() {
		if in.Type == typ {
			return in, true
		}
	}
	return breaker.Info{}, false
}

// halfOpenIdle puts idleType's breaker in HALF_OPEN and opens a worker stream for payType and
// idleType on b, with room for capacity jobs.
func halfOpenIdle(t *testing.T, b *Broker, capacity int) *Session {
	t.Helper()
	if _, err := b.ForceBreaker(context.Background(), idleType, breaker.StateHalfOpen); err != nil {
		t.Fatal(err)
	}
	s, _, err := b.Open(context.Background(), Hello{WorkerID: "w", Types: []string{payType, idleType}, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A HALF_OPEN breaker of a type that has no job waiting takes no room from a capped queue: a
// queue capped at 1 has its job handed to a worker that serves both types. (The round's probe
// grant set one slot aside in every capped queue its worker serves, whether or not a job of
// its type was there, and the queue never ran its job.)
func testProbeLeavesCappedRoom(t *testing.T, b *Broker) {
	ctx := context.Background()
	res, err := b.Enqueue(ctx, []JobSpec{{Type: payType, Queue: "capped"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetQueueLimit(ctx, "capped", 1); err != nil {
		t.Fatal(err)
	}
	s := halfOpenIdle(t, b, 2)
	got := assignments(t, s, 1)
	if got[0].Job.ID != res[0].ID {
		t.Fatalf("handed out job %d, want the capped queue's %d", got[0].Job.ID, res[0].ID)
	}
	if in, _ := breakerInfo(b, idleType); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 0 {
		t.Fatalf("the idle type's breaker after the round: %+v, want HALF_OPEN with no probe in flight", in)
	}
}

func TestProbeLeavesCappedRoom(t *testing.T) {
	t.Parallel()
	testProbeLeavesCappedRoom(t, newRaceBroker(t))
}

func TestSharedProbeLeavesCappedRoom(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 1, DefaultConfig(), breaker.CountConfig(), listening)
	testProbeLeavesCappedRoom(t, c.brokers[0])
}

// A HALF_OPEN breaker whose type has no job waiting stays as it is, round after round: no probe
// slot is taken for it and no timer is armed for one timing out, so its next probe time does not
// move. The first job of the type to come is its probe, and its success closes the breaker.
func testHalfOpenWaitsForAJob(t *testing.T, b *Broker, probeTimeout func() bool) {
	ctx := context.Background()
	s := halfOpenIdle(t, b, 2)
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: payType}}); err != nil {
		t.Fatal(err)
	}
	a := assignments(t, s, 1)[0]
	b.mu.Lock() // the round's hand-out is over
	b.mu.Unlock()
	if in, _ := breakerInfo(b, idleType); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 0 {
		t.Fatalf("the idle type's breaker after a round: %+v, want HALF_OPEN with no probe in flight", in)
	}
	if probeTimeout() {
		t.Fatal("a timer is armed for a probe slot timing out, with no probe in flight")
	}
	report(t, s, a, nil)

	if _, err := b.Enqueue(ctx, []JobSpec{{Type: idleType}}); err != nil {
		t.Fatal(err)
	}
	probe := assignments(t, s, 1)[0]
	b.mu.Lock() // the hand-out that sent the probe, and armed its timer, is over
	b.mu.Unlock()
	if in, _ := breakerInfo(b, idleType); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 1 {
		t.Fatalf("the idle type's breaker with its first job out: %+v, want HALF_OPEN with one probe", in)
	}
	if !probeTimeout() {
		t.Fatal("no timer is armed for the probe's slot timing out")
	}
	report(t, s, probe, nil)
	if in, _ := breakerInfo(b, idleType); in.State != breaker.StateClosed {
		t.Fatalf("the idle type's breaker after its probe succeeded: %+v, want CLOSED", in)
	}
}

func TestHalfOpenWaitsForAJob(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	testHalfOpenWaitsForAJob(t, b, func() bool {
		_, armed := b.svc.breakerWake.Armed()
		return armed
	})
}

func TestSharedHalfOpenWaitsForAJob(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 1, DefaultConfig(), breaker.CountConfig(), listening)
	b := c.brokers[0]
	// A shared breaker's probe slot times out in the database, whichever broker looks next: the
	// cached state's own timer is what is checked.
	testHalfOpenWaitsForAJob(t, b, func() bool {
		_, armed := b.svc.breakerWake.Armed()
		return armed
	})
}

// A HALF_OPEN breaker of a type that has no job waiting keeps no worker's slot either: a worker
// with room for one job, serving that type and another, is handed the other's job. (The round's
// probe grant set the slot aside, and the worker's other types were asked for nothing.) When a
// job of the type is waiting, it goes first: it is the probe.
func testProbeLeavesWorkerSlot(t *testing.T, b *Broker) {
	ctx := context.Background()
	res, err := b.Enqueue(ctx, []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	s := halfOpenIdle(t, b, 1)
	a := assignments(t, s, 1)[0]
	if a.Job.ID != res[0].ID {
		t.Fatalf("handed out job %d, want %d", a.Job.ID, res[0].ID)
	}
	probe, err := b.Enqueue(ctx, []JobSpec{{Type: idleType}, {Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	if got := succeedThenNext(t, s, a); got.Job.ID != probe[0].ID {
		t.Fatalf("handed out job %d with a probe waiting, want the probe %d", got.Job.ID, probe[0].ID)
	}
	if in, _ := breakerInfo(b, idleType); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 1 {
		t.Fatalf("the idle type's breaker with its probe out: %+v", in)
	}
}

// succeedThenNext reports a's success and returns the next assignment s is handed, which may
// come with the result's acknowledgement.
func succeedThenNext(t *testing.T, s *Session, a Assignment) Assignment {
	t.Helper()
	s.Result(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		msgs, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for an assignment after the success of job %d: %v", a.Job.ID, err)
		}
		for _, m := range msgs {
			switch m := m.(type) {
			case Assignment:
				return m
			case Refused:
				t.Fatalf("result of job %d refused: %+v", a.Job.ID, m)
			}
		}
	}
}

func TestProbeLeavesWorkerSlot(t *testing.T) {
	t.Parallel()
	testProbeLeavesWorkerSlot(t, newRaceBroker(t))
}

func TestSharedProbeLeavesWorkerSlot(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 1, DefaultConfig(), breaker.CountConfig(), listening)
	testProbeLeavesWorkerSlot(t, c.brokers[0])
}
