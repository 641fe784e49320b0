package client

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// InBatch adds the job to an open batch (CreateBatch).
func InBatch(id int64) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.Batch = id })
}

// BatchOptions are a batch's description and callbacks. A callback is a job the broker
// enqueues once, when the batch is done: OnSuccess when every job of the batch SUCCEEDED,
// OnComplete when every job is final (SUCCEEDED, DEAD or CANCELLED). Its metadata carries the
// batch's counts (see BatchCallback). A callback takes no RunAt, Delay, IdempotencyKey or Batch.
type BatchOptions struct {
	Description           string
	OnSuccess, OnComplete *JobSpec
}

// BatchState is where a batch is in its life.
type BatchState int32

const (
	BatchOpen     = BatchState(jobwirev1.BatchState_BATCH_STATE_OPEN)     // jobs may still be added
	BatchClosed   = BatchState(jobwirev1.BatchState_BATCH_STATE_CLOSED)   // closed, jobs not all final
	BatchComplete = BatchState(jobwirev1.BatchState_BATCH_STATE_COMPLETE) // its callbacks were enqueued
)

func (s BatchState) String() string {
	return strings.TrimPrefix(jobwirev1.BatchState(s).String(), "BATCH_STATE_")
}

// Batch is a batch with its counts.
type Batch struct {
	ID          int64
	Description string
	State       BatchState
	CreatedAt   time.Time
	ClosedAt    time.Time
	CompletedAt time.Time
	// Total is the batch's size (while open, the jobs added so far); Succeeded, Dead and
	// Cancelled are those of them final in each state.
	Total, Succeeded, Dead, Cancelled int64
	// OnSuccessType and OnCompleteType are the callbacks' job types ("": none).
	OnSuccessType, OnCompleteType string
	// SuccessJobID and CompleteJobID are the callbacks' jobs once enqueued.
	SuccessJobID, CompleteJobID int64
	// FailedJobIDs are the ids of its DEAD and CANCELLED jobs, lowest first, at most 1000
	// (GetBatch only).
	FailedJobIDs []int64
}

// Pending is how many of the batch's jobs are not final yet.
func (b *Batch) Pending() int64 { return b.Total - b.Succeeded - b.Dead - b.Cancelled }

func batchFromProto(p *jobwirev1.Batch) *Batch {
	return &Batch{ID: p.GetId(), Description: p.GetDescription(), State: BatchState(p.GetState()),
		CreatedAt: timeFromProto(p.GetCreatedAt()), ClosedAt: timeFromProto(p.GetClosedAt()),
		CompletedAt: timeFromProto(p.GetCompletedAt()), Total: p.GetTotal(), Succeeded: p.GetSucceeded(),
		Dead: p.GetDead(), Cancelled: p.GetCancelled(), OnSuccessType: p.GetOnSuccessType(),
		OnCompleteType: p.GetOnCompleteType(), SuccessJobID: p.GetSuccessJobId(), CompleteJobID: p.GetCompleteJobId(),
		FailedJobIDs: p.GetFailedJobIds()}
}

func batchOptionsToProto(op string, o *BatchOptions) (*jobwirev1.BatchOptions, error) {
	out := &jobwirev1.BatchOptions{Description: o.Description}
	var err error
	if o.OnSuccess != nil {
		if out.OnSuccess, err = specToProto(op+": OnSuccess", o.OnSuccess); err != nil {
			return nil, err
		}
	}
	if o.OnComplete != nil {
		if out.OnComplete, err = specToProto(op+": OnComplete", o.OnComplete); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EnqueueAsBatch stores specs as one new batch with opts' callbacks, all in one transaction,
// and returns the batch's id with the jobs. The batch is closed at once: its callbacks run
// when the last of these jobs is final.
func (c *Client) EnqueueAsBatch(ctx context.Context, opts BatchOptions, specs []JobSpec) (int64, []EnqueueResult, error) {
	const op = "EnqueueAsBatch"
	batch, err := batchOptionsToProto(op, &opts)
	if err != nil {
		return 0, nil, err
	}
	req := &jobwirev1.EnqueueBatchRequest{Batch: batch, Jobs: make([]*jobwirev1.JobSpec, len(specs))}
	for i := range specs {
		if req.Jobs[i], err = specToProto(fmt.Sprintf("%s[%d]", op, i), &specs[i]); err != nil {
			return 0, nil, err
		}
	}
	ctx, span := c.startSend(ctx, req.Jobs)
	resp, err := c.producer.EnqueueBatch(ctx, req)
	endSend(span, nil, err)
	if err != nil {
		return 0, nil, wrapErr(op, err)
	}
	out := make([]EnqueueResult, len(resp.GetJobs()))
	for i, j := range resp.GetJobs() {
		out[i] = enqueuedFromProto(j)
	}
	return resp.GetBatchId(), out, nil
}

// CreateBatch opens a batch: add jobs to it with InBatch (or JobSpec.Batch), from as many calls
// as needed, then CloseBatch.
func (c *Client) CreateBatch(ctx context.Context, opts BatchOptions) (*Batch, error) {
	const op = "CreateBatch"
	batch, err := batchOptionsToProto(op, &opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: batch})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return batchFromProto(resp.GetBatch()), nil
}

// CloseBatch says the batch has all its jobs: it completes, enqueueing its callbacks, once
// every one is final (at once if they all are). A job added after is refused
// (ErrFailedPrecondition). Closing a closed batch changes nothing.
func (c *Client) CloseBatch(ctx context.Context, id int64) (*Batch, error) {
	resp, err := c.producer.CloseBatch(ctx, &jobwirev1.CloseBatchRequest{Id: id})
	if err != nil {
		return nil, wrapErr("CloseBatch", err)
	}
	return batchFromProto(resp.GetBatch()), nil
}

// GetBatch returns a batch with its counts and failed jobs.
func (c *Client) GetBatch(ctx context.Context, id int64) (*Batch, error) {
	resp, err := c.admin.GetBatch(ctx, &jobwirev1.GetBatchRequest{Id: id})
	if err != nil {
		return nil, wrapErr("GetBatch", err)
	}
	return batchFromProto(resp.GetBatch()), nil
}

// ListBatchesParams filters ListBatches. Zero fields match any batch.
type ListBatchesParams struct {
	State     BatchState
	PageSize  int // 1..1000; 0: the broker default (100)
	PageToken string
}

// BatchPage is one page of a batch listing, newest first.
type BatchPage struct {
	Batches       []*Batch
	NextPageToken string
}

// ListBatches returns one page of batches, newest first.
func (c *Client) ListBatches(ctx context.Context, p *ListBatchesParams) (*BatchPage, error) {
	const op = "ListBatches"
	if p == nil {
		p = &ListBatchesParams{}
	}
	size, err := toInt32(op, "PageSize", p.PageSize)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.ListBatches(ctx, &jobwirev1.ListBatchesRequest{State: jobwirev1.BatchState(p.State),
		PageSize: size, PageToken: p.PageToken})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	out := &BatchPage{NextPageToken: resp.GetNextPageToken()}
	for _, b := range resp.GetBatches() {
		out.Batches = append(out.Batches, batchFromProto(b))
	}
	return out, nil
}

// BatchCallback is what a batch tells its callback job, in the job's metadata.
type BatchCallback struct {
	Batch int64
	// Kind is "success" or "complete".
	Kind                              string
	Total, Succeeded, Dead, Cancelled int64
	// Failed are the ids of the batch's DEAD and CANCELLED jobs, lowest first, at most 1000;
	// FailedMore counts those left out.
	Failed     []int64
	FailedMore int64
}

// ParseBatchCallback reads a batch callback's metadata (worker.Job.Metadata); ok is false for
// a job that is no batch's callback.
func ParseBatchCallback(metadata map[string]string) (cb BatchCallback, ok bool) {
	num := func(key string) int64 {
		n, _ := strconv.ParseInt(metadata[key], 10, 64)
		return n
	}
	if cb.Batch = num("jobwire.batch"); cb.Batch == 0 {
		return BatchCallback{}, false
	}
	cb.Kind = metadata["jobwire.batch.callback"]
	cb.Total, cb.Succeeded = num("jobwire.batch.total"), num("jobwire.batch.succeeded")
	cb.Dead, cb.Cancelled = num("jobwire.batch.dead"), num("jobwire.batch.cancelled")
	cb.FailedMore = num("jobwire.batch.failed_more")
	for s := range strings.SplitSeq(metadata["jobwire.batch.failed"], ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			cb.Failed = append(cb.Failed, id)
		}
	}
	return cb, true
}
