package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// batchJobs enqueues n jobs of type "t" as one batch with both callbacks.
func batchJobs(t *testing.T, b *brokertest.Bundle, n int) int64 {
	t.Helper()
	req := &jobwirev1.EnqueueBatchRequest{Batch: &jobwirev1.BatchOptions{Description: "nightly",
		OnSuccess:  &jobwirev1.JobSpec{Type: "report"},
		OnComplete: &jobwirev1.JobSpec{Type: "done", Payload: []byte("p")}}}
	for range n {
		req.Jobs = append(req.Jobs, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 1})
	}
	res, err := b.Producer.EnqueueBatch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetBatchId() <= 0 || len(res.GetJobs()) != n {
		t.Fatalf("EnqueueBatch: %v", res)
	}
	return res.GetBatchId()
}

func getBatch(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Batch {
	t.Helper()
	res, err := b.Admin.GetBatch(context.Background(), &jobwirev1.GetBatchRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetBatch()
}

// Every job of a batch succeeds, one result sent twice: both callbacks are assigned, once each,
// with the batch's counts in their metadata.
func TestBatchCallbacksRunOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t", "report", "done"))
	id := batchJobs(t, b, 5)
	callbacks := map[string]*jobwirev1.Job{}
	var next *jobwirev1.Assignment // handed out between a result's two acks
	for len(callbacks) < 2 {
		a := next
		if next = nil; a == nil {
			a = w.Assignment()
		}
		w.Started(a)
		if typ := a.GetJob().GetType(); typ != "t" {
			if callbacks[typ] != nil {
				t.Fatalf("callback %s assigned twice", typ)
			}
			callbacks[typ] = a.GetJob()
			ack(t, w.Report(brokertest.Ref(a), nil))
			continue
		}
		w.SendResult(brokertest.Ref(a), nil)
		w.SendResult(brokertest.Ref(a), nil) // a repeat counts nothing more
		for acks := 0; acks < 2; acks++ {
			m := w.Next()
			if as := m.GetAssignment(); as != nil && next == nil && acks == 1 {
				// The first ack freed the worker's slot: the next job may come before the
				// repeat's ack.
				next, acks = as, acks-1
				continue
			}
			ack(t, m)
		}
	}
	got := getBatch(t, b, id)
	if got.GetState() != jobwirev1.BatchState_BATCH_STATE_COMPLETE || got.GetTotal() != 5 || got.GetSucceeded() != 5 ||
		got.GetSuccessJobId() != callbacks["report"].GetId() || got.GetCompleteJobId() != callbacks["done"].GetId() {
		t.Fatalf("batch %v; callbacks %v", got, callbacks)
	}
	meta := callbacks["done"].GetMetadata()
	if meta["jobwire.batch"] != strconv.FormatInt(id, 10) || meta["jobwire.batch.succeeded"] != "5" ||
		meta["jobwire.batch.callback"] != "complete" || string(callbacks["done"].GetPayload()) != "p" {
		t.Fatalf("callback metadata %v", meta)
	}
	if m, ok := w.Poll(); ok {
		t.Fatalf("after the callbacks: %v", m)
	}
}

// A batch with a dead job runs its completion callback only, naming the dead job.
func TestBatchWithAFailureRunsOnlyItsCompletion(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t", "report", "done"))
	id := batchJobs(t, b, 3)
	var dead int64
	for i := range 3 {
		a := w.Assignment()
		w.Started(a)
		var f *jobwirev1.Failure
		if i == 1 {
			f, dead = brokertest.Fatal("ValueError"), a.GetJob().GetId()
		}
		ack(t, w.Report(brokertest.Ref(a), f))
	}
	a := w.Assignment()
	if a.GetJob().GetType() != "done" || a.GetJob().GetMetadata()["jobwire.batch.failed"] != strconv.FormatInt(dead, 10) {
		t.Fatalf("callback %v, want done naming job %d", a.GetJob(), dead)
	}
	got := getBatch(t, b, id)
	if got.GetSuccessJobId() != 0 || got.GetDead() != 1 || len(got.GetFailedJobIds()) != 1 {
		t.Fatalf("batch %v", got)
	}
}

// A batch filled by several calls completes once closed; a job added after is refused.
func TestOpenBatchFilledByCallsThenClosed(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	created, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{
		OnComplete: &jobwirev1.JobSpec{Type: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetBatch().GetId()
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", BatchId: id})
	if _, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
		{Type: "t", BatchId: id}, {Type: "t", BatchId: id}}}); err != nil {
		t.Fatal(err)
	}
	w := b.Connect(brokertest.Hello("w1", 1, "t", "done"))
	for range 3 {
		a := w.Assignment()
		w.Started(a)
		ack(t, w.Report(brokertest.Ref(a), nil))
	}
	if got := getBatch(t, b, id); got.GetState() != jobwirev1.BatchState_BATCH_STATE_OPEN || got.GetTotal() != 3 {
		t.Fatalf("open batch %v", got)
	}
	closed, err := b.Producer.CloseBatch(ctx, &jobwirev1.CloseBatchRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if closed.GetBatch().GetState() != jobwirev1.BatchState_BATCH_STATE_COMPLETE {
		t.Fatalf("closed batch %v", closed.GetBatch())
	}
	if a := w.Assignment(); a.GetJob().GetType() != "done" {
		t.Fatalf("assignment %v, want the callback", a)
	}
	_, err = b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t", BatchId: id}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("add to a closed batch: %v", err)
	}
	_, err = b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t", BatchId: id + 100}})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("add to no batch: %v", err)
	}
	list, err := b.Admin.ListBatches(ctx, &jobwirev1.ListBatchesRequest{State: jobwirev1.BatchState_BATCH_STATE_COMPLETE})
	if err != nil || len(list.GetBatches()) != 1 || list.GetBatches()[0].GetId() != id {
		t.Fatalf("ListBatches: %v, %v", list, err)
	}
}

func TestBatchRequestsAreValidated(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"delayed callback", func() error {
			_, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{
				OnSuccess: &jobwirev1.JobSpec{Type: "r", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(1)}}}})
			return err
		}, "batch.on_success: a callback runs when its batch completes"},
		{"no options", func() error {
			_, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{})
			return err
		}, "batch: is required"},
		{"two batches in one call", func() error {
			_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
				{Type: "t", BatchId: 1}, {Type: "t", BatchId: 2}}})
			return err
		}, "jobs[1].batch_id: is 2 but jobs[0].batch_id is 1"},
		{"batch id with a new batch", func() error {
			_, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Batch: &jobwirev1.BatchOptions{},
				Jobs: []*jobwirev1.JobSpec{{Type: "t", BatchId: 1}}})
			return err
		}, "jobs[0].batch_id: must be 0 when the request creates its batch"},
		{"reserved metadata", func() error {
			_, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{
				OnComplete: &jobwirev1.JobSpec{Type: "r", Metadata: map[string]string{"jobwire.batch.total": "1"}}}})
			return err
		}, "keys starting with \"jobwire.batch\" are the batch's own"},
		{"bad id", func() error {
			_, err := b.Admin.GetBatch(ctx, &jobwirev1.GetBatchRequest{})
			return err
		}, "id: must be a positive batch id, got 0"},
		{"unknown batch", func() error {
			_, err := b.Producer.CloseBatch(ctx, &jobwirev1.CloseBatchRequest{Id: 99})
			return err
		}, "batch 99: not found"},
	}
	for _, c := range cases {
		err := c.call()
		if err == nil || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
