package client_test

import (
	"context"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// BenchmarkEnqueue measures one Enqueue through the Go SDK, against a real broker in this
// process: the SDK's own allocations show in a memory profile under package client and grpc's
// client side.
func BenchmarkEnqueue(b *testing.B) {
	br := brokertest.New(b, brokertest.Options{})
	ctx := context.Background()
	c, err := client.Dial(ctx, br.Addr, client.WithBlock())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	payload := []byte(`{"n":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Enqueue(ctx, "bench", payload); err != nil {
			b.Fatal(err)
		}
	}
}
