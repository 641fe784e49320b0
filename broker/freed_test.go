package broker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// countedWrites is a store that counts its write transactions.
type countedWrites struct {
	store.Store
	n atomic.Int64
}

func (c *countedWrites) Write(ctx context.Context, op string, fn func(tx store.Tx) error) error {
	c.n.Add(1)
	return c.Store.Write(ctx, op, fn)
}

// A result frees its worker's slot for the round of the very write that stores it: a worker
// with one slot gets its next job from that write, after the result's ResultAck on its stream,
// so the slot is busy for one write after the result rather than two.
func TestResultFreesItsSlotForItsOwnWrite(t *testing.T) {
	t.Parallel()
	onlyGroupCommit(t)
	writes := &countedWrites{}
	b := newRaceBrokerOn(t, func(st store.Store) store.Store { writes.Store = st; return writes })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 4
	specs := make([]JobSpec, jobs)
	for i := range specs {
		specs[i].Type = "t"
	}
	if _, err := b.Enqueue(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// next reads the stream until it has an Assignment, or, after the last job, the ResultAck.
	next := func(last bool) (acked bool, a *Assignment) {
		t.Helper()
		for a == nil && !(last && acked) {
			msgs, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				switch m := m.(type) {
				case ResultAck:
					if a != nil {
						t.Fatal("an Assignment came before the ResultAck that frees its slot")
					}
					acked = true
				case Assignment:
					a = &m
				}
			}
		}
		return acked, a
	}
	_, a := next(false)
	for i := range jobs {
		before := writes.n.Load()
		s.Result(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, nil)
		last := i == jobs-1
		var acked bool
		acked, a = next(last)
		if !acked {
			t.Fatalf("job %d: an Assignment without the ResultAck of the slot's last job", i+1)
		}
		if n := writes.n.Load() - before; !last && n != 1 {
			t.Fatalf("job %d: the next job came %d writes after the result, want 1 (the write that stores it)", i+1, n)
		}
	}
}
