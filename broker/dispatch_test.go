package broker

import (
	"context"
	"testing"
)

// A grant that stops at its MaxBytes (its session's outbox is almost full) leaves jobs ready:
// another session's grant of the same scope in the same round still gets them.
func TestLeaseRoundGrantStoppedByBytesLeavesScopeOpen(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	payload := make([]byte, 100)
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t", Payload: payload}, {Type: "t", Payload: payload},
		{Type: "t", Payload: payload}}); err != nil {
		t.Fatal(err)
	}
	session := func(id string) *Session {
		return &Session{b: b, id: id, workerID: id, types: []string{"t"}, capacity: 5,
			out: newOutbox(b.now), held: map[int64]*lease{}}
	}
	byBytes := &grant{sess: session("w1"), params: b.leaseParams(session("w1"), []string{"t"}, 5, b.now())}
	byBytes.params.MaxBytes = 1 // stops after the first job
	other := &grant{sess: session("w2"), params: b.leaseParams(session("w2"), []string{"t"}, 5, b.now())}
	other.params.MaxBytes = OutboxGrantBytes

	// doOp answers the op itself, so the jobs stay leased and are not handed out.
	if err := b.doOp(ctx, b.leaseOp([]*grant{byBytes, other})); err != nil {
		t.Fatal(err)
	}
	if len(byBytes.leased) != 1 || len(other.leased) != 2 {
		t.Fatalf("leased %d and %d jobs, want 1 and 2", len(byBytes.leased), len(other.leased))
	}
}
