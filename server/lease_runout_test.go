package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// heartbeatLost checks that m, the answer to a heartbeat of ref alone, says the lease is lost: a
// Refused(HEARTBEAT, FAILED_PRECONDITION) for ref, then a HeartbeatAck that extends nothing.
func heartbeatLost(t *testing.T, w *brokertest.RawWorker, m *jobwirev1.ConnectResponse, ref *jobwirev1.LeaseRef) {
	t.Helper()
	r := m.GetRefused()
	if r == nil || r.GetRefusedMessage() != jobwirev1.RefusedMessage_REFUSED_MESSAGE_HEARTBEAT ||
		codes.Code(r.GetCode()) != codes.FailedPrecondition || r.GetJobId() != ref.GetJobId() ||
		r.GetLeaseToken() != ref.GetLeaseToken() {
		t.Fatalf("heartbeat of a lease that ran out answered %v, want it refused as FAILED_PRECONDITION", m)
	}
	if m := w.Next(); m.GetHeartbeatAck() == nil || len(m.GetHeartbeatAck().GetExtended()) != 0 {
		t.Fatalf("after the refusal: %v, want a HeartbeatAck that extends nothing", m)
	}
}

// A heartbeat the broker reads after the lease's deadline, before any sweep ended the lease (a
// broker frozen past the deadline reads the heartbeats queued meanwhile when it resumes), does
// not revive it: the worker hears the lease is lost, the stored lease keeps its deadline, and
// the sweep ends it as expired and offers the job again at once, not a whole lease later. A
// heartbeat read a nanosecond before the deadline extends it as usual.
func TestHeartbeatReadAfterTheDeadlineDoesNotExtend(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.SweepInterval = 24 * time.Hour // no sweep but the test's own
	lease := cfg.LeaseDuration
	for _, started := range []bool{false, true} {
		name := "leased"
		if started {
			name = "running"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := brokertest.New(t, brokertest.Options{Config: cfg})
			w := b.Connect(brokertest.Hello("w1", 1, "t"))
			id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 3})
			a := w.Assignment()
			ref := brokertest.Ref(a)
			state := jobwirev1.JobState_JOB_STATE_LEASED
			if started {
				w.Started(a)
				state = jobwirev1.JobState_JOB_STATE_RUNNING
				b.WaitState(id, state)
			}

			b.Clock.Advance(lease - time.Nanosecond)
			hb := w.Heartbeat(ref).GetHeartbeatAck()
			if len(hb.GetExtended()) != 1 || hb.GetExtended()[0].GetLeaseToken() != ref.GetLeaseToken() {
				t.Fatalf("heartbeat a nanosecond before the deadline answered %v, want the lease extended", hb)
			}

			// Exactly at the extended deadline, and later: the lease ran out.
			b.Clock.Advance(lease)
			before := storedLease(t, b, id)
			heartbeatLost(t, w, w.Heartbeat(ref), ref)
			b.Clock.Advance(time.Second)
			heartbeatLost(t, w, w.Heartbeat(ref), ref)
			if got := storedLease(t, b, id); got != before {
				t.Fatalf("a heartbeat after the deadline changed the stored lease:\n got %s\nwant %s", got, before)
			}
			if j := getJob(t, b, id); j.GetState() != state {
				t.Fatalf("before the sweep the job is %s, want %s", j.GetState(), state)
			}

			b.Broker.Sweep()
			attempt := int32(1) // a lease that never started spends no attempt
			if started {
				attempt = 2
				m := w.Next()
				if c := m.GetCancel(); c == nil || c.GetJobId() != id || c.GetLeaseToken() != ref.GetLeaseToken() ||
					c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST {
					t.Fatalf("after the sweep the worker got %v, want a Cancel for lease lost", m)
				}
				j := b.WaitState(id, jobwirev1.JobState_JOB_STATE_SCHEDULED)
				if h := j.GetAttemptHistory(); len(h) != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED {
					t.Fatalf("attempt history %v, want one attempt ended LEASE_EXPIRED", h)
				}
				b.Clock.Advance(5 * time.Second) // the retry's backoff (3s and up to 1s of jitter)
			}
			again := w.Assignment()
			if again.GetJob().GetId() != id || again.GetAttempt() != attempt || again.GetLeaseToken() == ref.GetLeaseToken() {
				t.Fatalf("after the sweep the worker got job %d attempt %d under token %s, want job %d attempt %d under a new token",
					again.GetJob().GetId(), again.GetAttempt(), again.GetLeaseToken(), id, attempt)
			}
		})
	}
}

// In a cluster the same holds on a broker that does not lead: a heartbeat it reads after the
// deadline is refused though the leader has not swept yet; the leader's sweep ends the lease as
// expired and offers the job again, and the broker holding the worker tells it to stop.
func TestClusterHeartbeatReadAfterTheDeadlineDoesNotExtend(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.SweepInterval = 10 * time.Minute // no sweep but the test's own until the end
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll, Config: cfg})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll, Config: cfg})
	a.WaitListening(2)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id, got := runJob(t, a, w)
	ref := brokertest.Ref(got)

	a.Clock.Advance(cfg.LeaseDuration) // exactly the deadline Started set
	before := storedLease(t, a, id)
	heartbeatLost(t, w, w.Heartbeat(ref), ref)
	if after := storedLease(t, a, id); after != before {
		t.Fatalf("a heartbeat after the deadline changed the stored lease:\n got %s\nwant %s", after, before)
	}

	a.Broker.Sweep() // the leader's
	j := a.WaitState(id, jobwirev1.JobState_JOB_STATE_SCHEDULED)
	if h := j.GetAttemptHistory(); len(h) != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED {
		t.Fatalf("attempt history %v, want one attempt ended LEASE_EXPIRED", h)
	}
	w2 := a.Connect(brokertest.Hello("w2", 1, "t"))
	a.Clock.Advance(5 * time.Second) // the retry's backoff (3s and up to 1s of jitter)
	if again := w2.Assignment(); again.GetJob().GetId() != id || again.GetAttempt() != 2 {
		t.Fatalf("after the sweep the job was offered as job %d attempt %d, want job %d attempt 2",
			again.GetJob().GetId(), again.GetAttempt(), id)
	}
	b.Advance(cfg.SweepInterval) // the broker holding the worker forgets the lease the leader ended
	m := w.Next()
	if c := m.GetCancel(); c == nil || c.GetJobId() != id || c.GetLeaseToken() != ref.GetLeaseToken() ||
		c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST {
		t.Fatalf("the worker of the lease got %v, want a Cancel for lease lost", m)
	}
}
