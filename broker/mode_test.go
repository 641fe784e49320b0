package broker

import (
	"context"
	"testing"
)

// A broker built without a cluster is alone: it leads, has no id, lists itself as the
// database's only broker, keeps its breakers in memory, and enforces its queues itself.
func TestBrokerWithoutAClusterIsAlone(t *testing.T) {
	t.Parallel()
	b, _, closeStore := newUnstartedBroker(t)
	startForTest(t, b, closeStore)
	if _, ok := b.mode.(*local); !ok {
		t.Fatalf("mode %T, want local", b.mode)
	}
	if !b.Leader() || b.brokerID() != "" || b.sharedBreakers() || b.mode.sharedQueues() || b.mode.forgetsClosed() {
		t.Fatalf("alone: leader %v, id %q, shared breakers %v, shared queues %v, forgets closed %v; want a lone leader",
			b.Leader(), b.brokerID(), b.sharedBreakers(), b.mode.sharedQueues(), b.mode.forgetsClosed())
	}
	list, self, err := b.Brokers(context.Background())
	if err != nil || len(list) != 1 || self != "" || !list[0].Leader || !list[0].Alive {
		t.Fatalf("Brokers: %+v, self %q, %v; want itself alone, leading", list, self, err)
	}
}
