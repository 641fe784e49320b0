package server_test

import (
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

func TestDbgWatch(t *testing.T) {
	b := brokertest.New(t, brokertest.Options{})
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	stream, err := b.Producer.WatchJobs(context.Background(), &jobwirev1.WatchJobsRequest{Ids: []int64{id}})
	t.Log(err)
	for i := 0; i < 2; i++ {
		m, err := stream.Recv()
		t.Log(m, err)
	}
}
