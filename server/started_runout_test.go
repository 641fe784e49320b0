package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// startedLost checks that m, the first answer after a Started of ref, says the lease is lost: a
// Refused(STARTED, FAILED_PRECONDITION) for ref.
func startedLost(t *testing.T, m *jobwirev1.ConnectResponse, ref *jobwirev1.LeaseRef) {
	t.Helper()
	r := m.GetRefused()
	if r == nil || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED ||
		codes.Code(r.GetCode()) != codes.FailedPrecondition || r.GetJobId() != ref.GetJobId() ||
		r.GetLeaseToken() != ref.GetLeaseToken() {
		t.Fatalf("Started of a lease that ran out answered %v, want it refused as FAILED_PRECONDITION", m)
	}
	if !strings.Contains(r.GetMessage(), "lease ran out") {
		t.Fatalf("refusal of a Started read after the deadline says %q, want it to say the lease ran out", r.GetMessage())
	}
}

// startCounter is an observer that counts the attempts the broker reports started.
type startCounter struct{ started atomic.Int64 }

func (c *startCounter) JobEnqueued(string, string)                     {}
func (c *startCounter) AttemptStarted(string, string, time.Duration)   { c.started.Add(1) }
func (c *startCounter) AttemptEnded(string, string, broker.AttemptEnd) {}
func (c *startCounter) JobCancelled(string, string)                    {}
func (c *startCounter) LeaseExpired(string)                            {}
func (c *startCounter) BreakerTransition(string, breaker.State, breaker.State, breaker.Reason) {
}
func (c *startCounter) BatchCommitted(int, time.Duration, error) {}

// A Started the broker reads at or after the lease's deadline, before any sweep ended the lease
// (a broker frozen past the deadline reads the Started queued meanwhile when it resumes), does
// not start the job: its worker gave the job up by its own count from the Assignment, so it
// hears the lease is lost, the stored lease stays as it was, and the sweep hands the job back
// with no attempt spent and offers it again at once. A Started read a nanosecond before the
// deadline starts the job as usual, with a whole lease from then.
func TestStartedReadAfterTheDeadlineDoesNotStart(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.SweepInterval = 24 * time.Hour // no sweep but the test's own
	lease := cfg.LeaseDuration
	for _, late := range []time.Duration{-time.Nanosecond, 0, time.Second} {
		t.Run(fmt.Sprint(late), func(t *testing.T) {
			t.Parallel()
			obs := &startCounter{}
			b := brokertest.New(t, brokertest.Options{Config: cfg, Observer: obs})
			w := b.Connect(brokertest.Hello("w1", 1, "t"))
			id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 3})
			counted := func(want int64) {
				t.Helper()
				if n := obs.started.Load(); n != want {
					t.Fatalf("the broker counted %d attempts started, want %d", n, want)
				}
			}
			a := w.Assignment()
			ref := brokertest.Ref(a)
			b.Clock.Advance(lease + late)
			if late < 0 {
				w.Started(a)
				b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
				want := b.Clock.Now().Add(lease)
				if j, err := b.Store.JobGet(context.Background(), id); err != nil || j.Attempts != 1 || !j.LeaseExpiresAt.Equal(want) {
					t.Fatalf("after a Started just before the deadline: %+v (%v), want attempt 1 leased until %s", j, err, want)
				}
				// A refusal of the start would come before this answer.
				if hb := w.Heartbeat(ref).GetHeartbeatAck(); len(hb.GetExtended()) != 1 {
					t.Fatalf("heartbeat after the start answered %v, want the lease extended", hb)
				}
				counted(1)
				return
			}

			before := storedLease(t, b, id)
			w.Started(a)
			startedLost(t, w.Next(), ref)
			if got := storedLease(t, b, id); got != before {
				t.Fatalf("a Started after the deadline changed the stored lease:\n got %s\nwant %s", got, before)
			}
			checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_LEASED, 0)
			counted(0)
			// The broker too holds the lease as run out: a heartbeat does not revive it.
			heartbeatLost(t, w, w.Heartbeat(ref), ref)

			b.Broker.Sweep()
			again := w.Assignment()
			if again.GetJob().GetId() != id || again.GetAttempt() != 1 || again.GetLeaseToken() == ref.GetLeaseToken() {
				t.Fatalf("after the sweep the worker got job %d attempt %d under token %s, want job %d attempt 1 under a new token",
					again.GetJob().GetId(), again.GetAttempt(), again.GetLeaseToken(), id)
			}
			checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_LEASED, 0)
			w.Started(again)
			b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
			checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_RUNNING, 1, jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING)
			counted(1)
		})
	}
}

// In a cluster the same holds on a broker that does not lead, whose starts go out in the batched
// statement of PostgreSQL: a Started it reads after the deadline is refused though the leader
// has not swept yet; the leader's sweep hands the job back with no attempt spent and offers it
// again, and the broker holding the worker tells it the lease is lost.
func TestClusterStartedReadAfterTheDeadlineDoesNotStart(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.SweepInterval = 10 * time.Minute // no sweep but the test's own until the end
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll, Config: cfg})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll, Config: cfg})
	a.WaitListening(2)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := a.Enqueue(spec("t"))
	got := w.Assignment()
	if got.GetJob().GetId() != id {
		t.Fatalf("the worker got job %d, want %d", got.GetJob().GetId(), id)
	}
	ref := brokertest.Ref(got)

	a.Clock.Advance(cfg.LeaseDuration) // exactly the deadline of the lease
	before := storedLease(t, a, id)
	w.Started(got)
	startedLost(t, w.Next(), ref)
	if after := storedLease(t, a, id); after != before {
		t.Fatalf("a Started after the deadline changed the stored lease:\n got %s\nwant %s", after, before)
	}

	a.Broker.Sweep() // the leader's
	a.WaitState(id, jobwirev1.JobState_JOB_STATE_PENDING)
	checkJob(t, a, id, jobwirev1.JobState_JOB_STATE_PENDING, 0)
	w2 := a.Connect(brokertest.Hello("w2", 1, "t"))
	if again := w2.Assignment(); again.GetJob().GetId() != id || again.GetAttempt() != 1 {
		t.Fatalf("after the sweep the job was offered as job %d attempt %d, want job %d attempt 1",
			again.GetJob().GetId(), again.GetAttempt(), id)
	}
	b.Advance(cfg.SweepInterval + time.Second) // the broker holding the worker forgets the lease the leader ended
	m := w.Next()
	if c := m.GetCancel(); c == nil || c.GetJobId() != id || c.GetLeaseToken() != ref.GetLeaseToken() ||
		c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST {
		t.Fatalf("the worker of the lease got %v, want a Cancel for lease lost", m)
	}
}
