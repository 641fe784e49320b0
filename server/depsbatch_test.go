package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A job that waits for parents cannot belong to a batch: a dependent cancelled because its
// parent failed is cancelled by the store's settling, which a batch does not count, so its
// batch would never complete. Each way of asking for it is refused, naming the field.
func TestDependentsAreKeptOutOfBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := brokertest.New(t, brokertest.Options{})
	parent := b.Enqueue(spec("t"))
	open, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{
		OnComplete: &jobwirev1.JobSpec{Type: "cb"}}})
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	tests := []struct {
		name, field string
		call        func() error
	}{
		{"enqueue into an open batch", "job.depends_on", func() error {
			_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t",
				DependsOn: []int64{parent}, BatchId: open.GetBatch().GetId()}})
			return err
		}},
		{"enqueue of a new batch", "jobs[1].depends_on", func() error {
			_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{
				Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "cb"}},
				Jobs:  []*jobwirev1.JobSpec{{Type: "t"}, {Type: "t", DependsOn: []int64{parent}}}})
			return err
		}},
		{"a graph's node", "nodes[1].depends_on", func() error {
			_, err := b.Producer.EnqueueGraph(ctx, &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
				{Key: "a", Job: &jobwirev1.JobSpec{Type: "t"}},
				{Key: "b", Job: &jobwirev1.JobSpec{Type: "t", BatchId: open.GetBatch().GetId()}, DependsOn: []string{"a"}}}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.field) ||
				!strings.Contains(err.Error(), "cannot wait for parents") {
				t.Fatalf("got %v, want INVALID_ARGUMENT naming %s", err, tt.field)
			}
		})
	}
}
