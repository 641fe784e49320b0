package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
)

// A large enqueue, which the enqueue writer stores beside the writer, reaches an idle worker:
// the enqueue writer asks for a round once it commits. The broker hears no database
// notification here (deaf) and its clock stands still, so nothing else would start one.
func TestLargeEnqueueIsDispatched(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, DefaultConfig(), breaker.CountConfig(), deaf)
	b := c.brokers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]JobSpec, SeparateEnqueueJobs)
	for i := range specs {
		specs[i].Type = "t"
	}
	if _, err := b.Enqueue(ctx, specs); err != nil {
		t.Fatal(err)
	}
	assigned := 0
	for assigned < len(specs) {
		msgs, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("%d of %d jobs handed out: %v", assigned, len(specs), err)
		}
		for _, m := range msgs {
			if _, ok := m.(Assignment); ok {
				assigned++
			}
		}
	}
}
