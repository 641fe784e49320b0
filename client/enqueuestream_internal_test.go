package client

import (
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// Against a broker that does not serve EnqueueStream, Enqueue goes back to calls: the first
// job is sent as a call once the stream is refused, and so is every one after.
func TestEnqueueStreamsFallBackToCallsOnAnOlderBroker(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}})})
	c, err := Dial(t.Context(), b.addr, WithEnqueueStreams(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		r, err := c.Enqueue(t.Context(), "mail", nil)
		if err != nil || r.ID != 7 {
			t.Fatalf("Enqueue %d = %+v, %v; want job 7 through a call", i, r, err)
		}
	}
	if got := len(b.broker.requests("Enqueue")); got != 3 {
		t.Fatalf("the broker received %d Enqueue calls, want 3", got)
	}
	if !c.streams.off.Load() {
		t.Fatal("the client still tries streams on a broker without them")
	}
}
