package auth

import (
	"fmt"
	"testing"
	"time"
)

// Past maxPeers tracked clients, new ones share one bucket: an attacker with many addresses
// gets one client's allowance from those beyond the bound, not one each. Clients whose bucket
// has refilled are forgotten to make room.
func TestFailuresBeyondMaxPeersShareABucket(t *testing.T) {
	t.Parallel()
	f := newFailures(FailureOptions{Rate: 1, Burst: 2})
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range maxPeers {
		f.charge(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), now)
	}
	if len(f.peers) != maxPeers {
		t.Fatalf("%d clients tracked, want %d", len(f.peers), maxPeers)
	}
	for i := range 2 {
		if w := f.wait(fmt.Sprintf("192.0.2.%d", i), now); w != 0 {
			t.Fatalf("new client %d waits %s before the shared bucket is spent", i, w)
		}
		f.charge(fmt.Sprintf("192.0.2.%d", i), now)
	}
	if w := f.wait("192.0.2.99", now); w != time.Second {
		t.Fatalf("a third new client waits %s, want 1s: the shared bucket is spent", w)
	}
	if len(f.peers) != maxPeers {
		t.Fatalf("%d clients tracked, want the bound %d", len(f.peers), maxPeers)
	}
	// Two seconds later the tracked buckets are full again, and forgotten as a new client comes.
	now = now.Add(2 * time.Second)
	f.charge("198.51.100.1", now)
	if len(f.peers) != 1 || f.peers["198.51.100.1"] == nil {
		t.Fatalf("after the buckets refilled, %d clients tracked, want only the new one", len(f.peers))
	}
}
