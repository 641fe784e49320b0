package client_test

import (
	"errors"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A batch made by the client completes once its jobs are final, and its callback's metadata
// reads back as the batch's counts.
func TestBatchFromTheClient(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	ctx := t.Context()
	open, err := c.CreateBatch(ctx, client.BatchOptions{Description: "import",
		OnComplete: &client.JobSpec{Type: "imported"}})
	if err != nil || open.State != client.BatchOpen {
		t.Fatalf("CreateBatch: %+v, %v", open, err)
	}
	if _, err := c.Enqueue(ctx, "row", nil, client.InBatch(open.ID)); err != nil {
		t.Fatal(err)
	}
	id, jobs, err := c.EnqueueAsBatch(ctx, client.BatchOptions{OnSuccess: &client.JobSpec{Type: "done"}},
		[]client.JobSpec{client.NewJobSpec("row", nil), client.NewJobSpec("row", nil)})
	if err != nil || id == 0 || len(jobs) != 2 {
		t.Fatalf("EnqueueAsBatch: %d, %v, %v", id, jobs, err)
	}
	w := b.Connect(brokertest.Hello("w1", 1, "row", "imported"))
	for range 3 {
		a := w.Assignment()
		w.Started(a)
		w.Report(brokertest.Ref(a), brokertest.Fatal("Bad"))
	}
	closed, err := c.CloseBatch(ctx, open.ID)
	if err != nil || closed.State != client.BatchComplete || closed.Dead != 1 || closed.Pending() != 0 {
		t.Fatalf("CloseBatch: %+v, %v", closed, err)
	}
	a := w.Assignment()
	cb, ok := client.ParseBatchCallback(a.GetJob().GetMetadata())
	if !ok || cb.Batch != open.ID || cb.Kind != "complete" || cb.Total != 1 || cb.Dead != 1 || len(cb.Failed) != 1 {
		t.Fatalf("callback %+v (%v)", cb, ok)
	}
	got, err := c.GetBatch(ctx, id)
	if err != nil || got.State != client.BatchComplete || got.SuccessJobID != 0 || got.Dead != 2 {
		t.Fatalf("GetBatch: %+v, %v", got, err)
	}
	page, err := c.ListBatches(ctx, &client.ListBatchesParams{State: client.BatchComplete})
	if err != nil || len(page.Batches) != 2 {
		t.Fatalf("ListBatches: %+v, %v", page, err)
	}
	if _, err := c.Enqueue(ctx, "row", nil, client.InBatch(open.ID)); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Fatalf("enqueue into a closed batch: %v", err)
	}
}
