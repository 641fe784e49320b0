package server_test

import (
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// BenchmarkEnqueueAuth measures one Enqueue round trip with auth off, and on with a producer
// token scoped to the job's type (verification from the cache, role and scope checks).
func BenchmarkEnqueueAuth(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "scoped-producer"
		}
		b.Run(name, func(b *testing.B) {
			br := brokertest.New(b, brokertest.Options{RequireAuth: on})
			p := br.Producer
			if on {
				p = jobwirev1.NewProducerServiceClient(br.DialToken(br.Token(auth.RoleProducer, auth.Scope{Types: []string{"bench.*"}})))
			}
			ctx := context.Background()
			req := &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "bench.t"}}
			b.ResetTimer()
			for range b.N {
				if _, err := p.Enqueue(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
