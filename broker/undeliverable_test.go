package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
)

// An assignment its transport could not send (Undeliverable) fails its job FATAL at once, with
// the size in its error, and frees the worker's slot for the next job; the worker, which never
// saw the lease, gets no answer about it, nor about one that ended meanwhile; nor about a lease
// handed back unsent, which is offered again. No attempt is spent, as none started: the job
// keeps its count, has no attempt record, and its type's breaker, which opens at the first
// FATAL attempt here, stays closed.
func TestUndeliverableIsDeadAndUnanswered(t *testing.T) {
	t.Parallel()
	bc := breaker.DefaultConfig()
	bc.OpenOnFatal = true
	b := newRaceBrokerWith(t, nil, &BreakerOptions{Default: bc})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t"}, {Type: "t"}, {Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	// next reads the stream until its next Assignment; nothing else may come.
	next := func() Assignment {
		t.Helper()
		for {
			msgs, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				a, ok := m.(Assignment)
				if !ok {
					t.Fatalf("the worker was sent %T %+v", m, m)
				}
				return a
			}
		}
	}
	first := next()
	s.Undeliverable(job.LeaseRef{JobID: first.Job.ID, Token: first.Token}, 5<<20, 4<<20)
	second := next()
	if second.Job.ID == first.Job.ID {
		t.Fatalf("job %d was assigned again", first.Job.ID)
	}
	// Its lease ended: undeliverable again, it is not answered either (no Refusal comes
	// before the third job's assignment).
	s.Undeliverable(job.LeaseRef{JobID: first.Job.ID, Token: first.Token}, 5<<20, 4<<20)
	s.Undeliverable(job.LeaseRef{JobID: second.Job.ID, Token: second.Token}, 5<<20, 4<<20)
	third := next()
	if third.Job.ID == first.Job.ID || third.Job.ID == second.Job.ID {
		t.Fatalf("job %d was assigned again", third.Job.ID)
	}
	// A hand back (an assignment not sent for want of its parents' results) is not answered
	// either, even for a lease that ended: no Refusal comes before the job is assigned again.
	s.handBack(job.LeaseRef{JobID: first.Job.ID, Token: first.Token})
	s.handBack(job.LeaseRef{JobID: third.Job.ID, Token: third.Token})
	if again := next(); again.Job.ID != third.Job.ID || again.Token == third.Token {
		t.Fatalf("after its hand back, job %d (lease %v) was assigned, want job %d under a new lease", again.Job.ID, again.Token, third.Job.ID)
	}
	j, err := b.Get(ctx, first.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StateDead || j.DeadReason != job.DeadFatal || j.LastErrorType != AssignmentTooLarge ||
		j.LastErrorMessage != "the job's assignment is 5242880 bytes encoded (its payload, metadata and parents' results); "+
			"a worker reads at most 4194304 in one message" {
		t.Errorf("job %s (%v): %s: %s; want dead, FATAL %s with the sizes", j.State, j.DeadReason, j.LastErrorType,
			j.LastErrorMessage, AssignmentTooLarge)
	}
	if j.Attempts != 0 || len(j.History) != 0 {
		t.Errorf("job dead undelivered: attempts %d, history %+v; want none", j.Attempts, j.History)
	}
	for _, info := range b.Breakers() {
		if info.State != breaker.StateClosed || info.FailuresInWindow != 0 {
			t.Errorf("breaker of %s: %s with %d failures; want closed with none", info.Type, info.State, info.FailuresInWindow)
		}
	}
}
