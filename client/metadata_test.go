package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// Metadata goes to the broker with the job and comes back with it.
func TestEnqueueMetadataRoundTrips(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, "t", nil, client.Metadata("tenant", "acme"), client.Metadata("request-id", "r-1"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Metadata) != 2 || j.Metadata["tenant"] != "acme" || j.Metadata["request-id"] != "r-1" {
		t.Errorf("metadata = %v; without a span in ctx no trace context is added", j.Metadata)
	}
	_, err = c.Enqueue(ctx, "t", nil, client.Metadata("bad key", "v"))
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a bad metadata key: %v, want ErrInvalidArgument", err)
	}
}
