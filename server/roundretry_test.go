package server_test

import (
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A dispatch round whose transaction is retried after a storage fault leases no more jobs than
// the worker has room for. The round's probe grant (a HALF_OPEN breaker's type with no job
// waiting) sets the worker's one slot aside and gives it back to the grant of its other type
// when it leases nothing; the retry must start from the round's plan, not from what the first
// try gave back, or the slot is given back twice and two jobs are leased for it.
func TestRetriedRoundLeasesNoMoreThanTheWorkersRoom(t *testing.T) {
	t.Parallel()
	faults := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: faults})
	ctx := context.Background()
	if _, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "idle",
		State: jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "pay"})
	}
	faults.Inject(brokertest.FaultInside, 1, "lease")
	w := b.Connect(brokertest.Hello("w", 1, "pay", "idle"))
	a := w.Assignment()
	if faults.Injected() != 1 {
		t.Fatalf("%d faults injected, want the round's transaction to have failed once", faults.Injected())
	}
	// A heartbeat's answer comes after anything the broker had queued before it.
	if m := w.Heartbeat(&jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()}); m.GetHeartbeatAck() == nil {
		t.Fatalf("a worker with room for one job was sent %v after its first", m)
	}
}
