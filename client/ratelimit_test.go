package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The client sets, lists and removes rate limits, names a job's rate key, and says why a job
// waits: a keyed limit of one start a minute holds the second job of a key.
func TestRateLimitsThroughTheClient(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	ctx := t.Context()
	if err := c.SetRateLimit(ctx, client.RateLimit{Name: "per-customer", Type: "sync", Key: "metadata.customer",
		Rate: 1, Interval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRateLimit(ctx, client.RateLimit{Name: "bad", Rate: 0, Interval: time.Second}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a rate of 0: %v; want ErrInvalidArgument", err)
	}
	first, err := c.Enqueue(ctx, "sync", nil, client.RateKey("acme"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Enqueue(ctx, "sync", nil, client.Metadata("customer", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	w := b.Connect(brokertest.Hello("w", 4, "sync"))
	if got := w.Assignment().GetJob().GetId(); got != first.ID {
		t.Fatalf("handed out job %d, want %d", got, first.ID)
	}
	brokertest.WaitFor(t, "the second job to wait for its key", func() bool {
		why, err := c.Why(ctx, second.ID)
		return err == nil && why.Reason == "rate_limited_key" && why.Until.Equal(brokertest.Start.Add(time.Minute))
	})
	ls, err := c.ListRateLimits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Keys != 1 || ls[0].KeysLimited != 1 || ls[0].Burst != 1 {
		t.Fatalf("ListRateLimits = %+v, %v; want the limit with its one key limited", ls, err)
	}
	if err := c.RemoveRateLimit(ctx, "per-customer"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveRateLimit(ctx, "per-customer"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("removing it again: %v; want ErrNotFound", err)
	}
	if got := w.Assignment().GetJob().GetId(); got != second.ID {
		t.Fatalf("handed out job %d once the limit was removed, want %d", got, second.ID)
	}
}
