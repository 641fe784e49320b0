package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
)

// maxBatchDescription bounds a batch's description, in bytes.
const maxBatchDescription = 200

// validateBatchRequest checks the requests of batches, and the batch fields of enqueues; ok
// says req is one of them.
func (l Limits) validateBatchRequest(req any, now time.Time) (ok bool, err error) {
	switch r := req.(type) {
	case *jobwirev1.EnqueueRequest:
		if id := r.GetJob().GetBatchId(); id < 0 {
			return false, invalid("job.batch_id", "must be a positive batch id or 0, got %d", id)
		}
	case *jobwirev1.EnqueueBatchRequest:
		if len(r.GetJobs()) == 0 {
			return false, nil // refused for that below
		}
		return false, l.validateBatchEnqueue(r, now)
	case *jobwirev1.CreateBatchRequest:
		return true, l.validateBatchOptions("batch", r.GetBatch(), now)
	case *jobwirev1.CloseBatchRequest:
		return true, validBatchID("id", r.GetId())
	case *jobwirev1.GetBatchRequest:
		return true, validBatchID("id", r.GetId())
	case *jobwirev1.ListBatchesRequest:
		if st := r.GetState(); st != jobwirev1.BatchState_BATCH_STATE_UNSPECIFIED {
			if _, ok := jobwirev1.BatchState_name[int32(st)]; !ok {
				return true, invalid("state", "is not a batch state: %d", st)
			}
		}
		if err := validPageSize(r.GetPageSize()); err != nil {
			return true, err
		}
		_, err := decodeJobToken(r.GetPageToken())
		return true, err
	}
	return false, nil
}

// validateBatchEnqueue checks that an enqueue's jobs go to one batch at most: the one it
// creates (batch), or one open batch every spec names.
func (l Limits) validateBatchEnqueue(r *jobwirev1.EnqueueBatchRequest, now time.Time) error {
	jobs := r.GetJobs()
	if r.GetBatch() != nil {
		for i, spec := range jobs {
			if spec.GetBatchId() != 0 {
				return invalid(fmt.Sprintf("jobs[%d].batch_id", i), "must be 0 when the request creates its batch (batch is set), got %d", spec.GetBatchId())
			}
		}
		return l.validateBatchOptions("batch", r.GetBatch(), now)
	}
	for i, spec := range jobs {
		if id := spec.GetBatchId(); id != jobs[0].GetBatchId() {
			return invalid(fmt.Sprintf("jobs[%d].batch_id", i), "is %d but jobs[0].batch_id is %d: the jobs of one call go to one batch", id, jobs[0].GetBatchId())
		}
	}
	if id := jobs[0].GetBatchId(); id < 0 {
		return invalid("jobs[0].batch_id", "must be a positive batch id or 0, got %d", id)
	}
	return nil
}

func (l Limits) validateBatchOptions(field string, o *jobwirev1.BatchOptions, now time.Time) error {
	if o == nil {
		return invalid(field, "is required")
	}
	if n := len(o.GetDescription()); n > maxBatchDescription {
		return invalid(field+".description", "is %d bytes, more than the limit of %d", n, maxBatchDescription)
	}
	for name, cb := range map[string]*jobwirev1.JobSpec{"on_success": o.GetOnSuccess(), "on_complete": o.GetOnComplete()} {
		if cb == nil {
			continue
		}
		prefix := field + "." + name
		if err := l.validateSpec(prefix, cb, now); err != nil {
			return err
		}
		switch {
		case cb.GetSchedule() != nil:
			return invalid(prefix, "a callback runs when its batch completes: it takes no run_at or delay")
		case cb.GetIdempotencyKey() != "":
			return invalid(prefix+".idempotency_key", "a callback is enqueued once by its batch: it takes no idempotency key")
		case cb.GetBatchId() != 0:
			return invalid(prefix+".batch_id", "a callback belongs to no batch: it must be 0, got %d", cb.GetBatchId())
		}
		for k := range cb.GetMetadata() {
			if strings.HasPrefix(k, broker.BatchMetaPrefix) {
				return invalid(prefix+".metadata", "key %q: keys starting with %q are the batch's own (its counts)", k, broker.BatchMetaPrefix)
			}
		}
	}
	return nil
}

func validBatchID(field string, id int64) error {
	if id <= 0 {
		return invalid(field, "must be a positive batch id, got %d", id)
	}
	return nil
}

// authorizeBatch checks that a scoped producer token covers a batch's callbacks.
func authorizeBatch(p auth.Principal, req any) error {
	var o *jobwirev1.BatchOptions
	switch r := req.(type) {
	case *jobwirev1.EnqueueBatchRequest:
		o = r.GetBatch()
	case *jobwirev1.CreateBatchRequest:
		o = r.GetBatch()
	}
	if cb := o.GetOnSuccess(); cb != nil {
		if err := checkJobScope(p, "batch.on_success", cb.GetQueue(), cb.GetType()); err != nil {
			return err
		}
	}
	if cb := o.GetOnComplete(); cb != nil {
		return checkJobScope(p, "batch.on_complete", cb.GetQueue(), cb.GetType())
	}
	return nil
}

// batchOptionsFromProto is the broker's form of validated options.
func batchOptionsFromProto(o *jobwirev1.BatchOptions) *broker.BatchOptions {
	if o == nil {
		return nil
	}
	out := &broker.BatchOptions{Description: o.GetDescription()}
	if cb := o.GetOnSuccess(); cb != nil {
		s := jobSpecFromProto(cb)
		out.OnSuccess = &s
	}
	if cb := o.GetOnComplete(); cb != nil {
		s := jobSpecFromProto(cb)
		out.OnComplete = &s
	}
	return out
}

// enqueueIntoBatch is EnqueueBatch with a batch to create.
func (p *producer) enqueueIntoBatch(ctx context.Context, req *jobwirev1.EnqueueBatchRequest, specs []broker.JobSpec) (*jobwirev1.EnqueueBatchResponse, error) {
	res, id, err := p.b.EnqueueBatch(ctx, specs, batchOptionsFromProto(req.GetBatch()))
	if err != nil {
		return nil, enqueueStatus(err)
	}
	out := &jobwirev1.EnqueueBatchResponse{Jobs: make([]*jobwirev1.EnqueuedJob, len(res)), BatchId: id}
	for i, r := range res {
		out.Jobs[i] = enqueuedToProto(r)
	}
	return out, nil
}

// enqueueStatus is the status of a failed enqueue of a batch.
func enqueueStatus(err error) error {
	var conflict *broker.IdempotencyConflictError
	if errors.As(err, &conflict) {
		return status.Errorf(codes.AlreadyExists, "jobs[%d]: %v; no job of this batch was stored", conflict.Index, err)
	}
	return depsStatus(err)
}

func (p *producer) CreateBatch(ctx context.Context, req *jobwirev1.CreateBatchRequest) (*jobwirev1.CreateBatchResponse, error) {
	b, err := p.b.CreateBatch(ctx, *batchOptionsFromProto(req.GetBatch()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.CreateBatchResponse{Batch: batchToProto(b)}, nil
}

func (p *producer) CloseBatch(ctx context.Context, req *jobwirev1.CloseBatchRequest) (*jobwirev1.CloseBatchResponse, error) {
	b, err := p.b.CloseBatch(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.CloseBatchResponse{Batch: batchToProto(b)}, nil
}

func (a *admin) GetBatch(ctx context.Context, req *jobwirev1.GetBatchRequest) (*jobwirev1.GetBatchResponse, error) {
	b, err := a.b.GetBatch(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.GetBatchResponse{Batch: batchToProto(b)}, nil
}

func (a *admin) ListBatches(ctx context.Context, req *jobwirev1.ListBatchesRequest) (*jobwirev1.ListBatchesResponse, error) {
	before, err := decodeJobToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	f := broker.BatchFilter{Before: before, Limit: size + 1}
	switch req.GetState() {
	case jobwirev1.BatchState_BATCH_STATE_OPEN:
		f.Open = true
	case jobwirev1.BatchState_BATCH_STATE_CLOSED:
		f.Closed = true
	case jobwirev1.BatchState_BATCH_STATE_COMPLETE:
		f.Complete = true
	}
	bs, err := a.b.ListBatches(ctx, f)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListBatchesResponse{}
	if len(bs) > size {
		bs = bs[:size]
		out.NextPageToken = encodeJobToken(bs[size-1].ID)
	}
	out.Batches = make([]*jobwirev1.Batch, len(bs))
	for i, b := range bs {
		out.Batches[i] = batchToProto(b)
	}
	return out, nil
}

func batchToProto(b *broker.Batch) *jobwirev1.Batch {
	out := &jobwirev1.Batch{Id: b.ID, Description: b.Description, State: jobwirev1.BatchState_BATCH_STATE_OPEN,
		CreatedAt: ts(b.CreatedAt), Total: b.Total, Succeeded: b.Succeeded, Dead: b.Dead, Cancelled: b.Cancelled,
		SuccessJobId: b.SuccessJobID, CompleteJobId: b.CompleteJobID, FailedJobIds: b.FailedJobIDs,
		ClosedAt: ts(b.ClosedAt), CompletedAt: ts(b.CompletedAt)}
	switch {
	case b.Complete():
		out.State = jobwirev1.BatchState_BATCH_STATE_COMPLETE
	case !b.Open():
		out.State = jobwirev1.BatchState_BATCH_STATE_CLOSED
	}
	if b.OnSuccess != nil {
		out.OnSuccessType = b.OnSuccess.Type
	}
	if b.OnComplete != nil {
		out.OnCompleteType = b.OnComplete.Type
	}
	return out
}
