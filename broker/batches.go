package broker

import (
	"context"
	"errors"
	"time"

	"github.com/jobwire/jobwire/broker/commit"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Batches: a group of jobs whose callbacks are enqueued once, when the last of them is final
// (docs/workflows.md). The broker creates, fills and closes batches through its writer; the
// counting is the store's, in the transaction of each job's final write (store.BatchWriter),
// which is what makes a callback run exactly once across brokers and repeated results. The
// broker's part where a job becomes final is to name the job's batch in the write
// (finishParams) and to run a dispatch round once a batch's job is final, for the callback the
// commit may have enqueued (batchesWritten).

// ErrBatchClosed: a job was added to a batch that is closed.
var ErrBatchClosed = store.ErrBatchClosed

// BatchMetaPrefix starts every metadata key a batch gives its callbacks (store.BatchMetaID and
// the keys of its counts); a callback's own spec may not use it.
const BatchMetaPrefix = store.BatchMetaID

// BatchOptions are a new batch's description and callbacks; a nil callback is none.
type BatchOptions struct {
	Description           string
	OnSuccess, OnComplete *JobSpec
}

// Batch is a batch as stored.
type Batch = store.Batch

// BatchFilter selects batches to list: by state (all false: any), below an id (0: from the
// newest).
type BatchFilter = store.BatchListParams

// callback is the stored form of a callback spec, its defaults filled in.
func (b *Broker) callback(s *JobSpec) *store.BatchCallback {
	if s == nil {
		return nil
	}
	d := s.withDefaults(b.cfg, b.now())
	return &store.BatchCallback{Type: d.Type, Queue: d.Queue, Payload: d.Payload, Priority: d.Priority,
		MaxAttempts: d.MaxAttempts, AttemptTimeout: d.AttemptTimeout, Metadata: d.Metadata}
}

func (b *Broker) createParams(opts *BatchOptions, now time.Time) *store.BatchCreateParams {
	return &store.BatchCreateParams{Description: opts.Description, OnSuccess: b.callback(opts.OnSuccess),
		OnComplete: b.callback(opts.OnComplete), Now: now}
}

// CreateBatch opens a batch that jobs are then added to (JobSpec.Batch) until CloseBatch.
func (b *Broker) CreateBatch(ctx context.Context, opts BatchOptions) (*Batch, error) {
	p := b.createParams(&opts, b.now())
	var id int64
	err := b.do(ctx, "batch_create", func(tx store.Tx) error {
		var err error
		id, err = tx.BatchCreate(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return b.st.BatchGet(ctx, id)
}

// CloseBatch closes a batch: its size is fixed, and it completes, enqueueing its callbacks,
// once every job of it is final (at once when they all are already). Closing a closed batch
// changes nothing.
func (b *Broker) CloseBatch(ctx context.Context, id int64) (*Batch, error) {
	now := b.now()
	err := b.do(ctx, "batch_close", func(tx store.Tx) error {
		_, err := tx.BatchClose(id, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	b.signal() // its callbacks may be ready
	return b.st.BatchGet(ctx, id)
}

// GetBatch reads a batch with its counts and failed jobs.
func (b *Broker) GetBatch(ctx context.Context, id int64) (*Batch, error) {
	return b.st.BatchGet(ctx, id)
}

// ListBatches lists batches, newest first.
func (b *Broker) ListBatches(ctx context.Context, f BatchFilter) ([]*Batch, error) {
	return b.st.BatchList(ctx, &f)
}

// EnqueueBatch stores jobs in one transaction as Enqueue does, and puts them in a batch: a new
// one, created and closed with them, when opts is not nil; else the open batch every spec
// names (JobSpec.Batch). It returns the batch's id with the jobs.
func (b *Broker) EnqueueBatch(ctx context.Context, specs []JobSpec, opts *BatchOptions) ([]Enqueued, int64, error) {
	if hasDeps(specs) {
		return b.enqueueBatchWithDeps(ctx, specs, opts)
	}
	now := b.now()
	params := make([]*store.JobInsertParams, len(specs))
	for i := range specs {
		s := specs[i].withDefaults(b.cfg, now)
		params[i] = s.insertParams(now)
	}
	o := &batchEnqueueOp{enqueueOp: newEnqueueOp(params, now), now: now}
	if opts != nil {
		o.create = b.createParams(opts, now)
	} else if len(specs) > 0 {
		o.batch = specs[0].Batch
	}
	if err := b.doOp(ctx, o); err != nil {
		return nil, 0, err
	}
	if o.err != nil {
		return nil, 0, o.err
	}
	out := make([]Enqueued, len(o.results))
	for i, r := range o.results {
		out[i] = Enqueued{ID: r.ID, Duplicate: r.Duplicate, State: r.State, RunAt: r.RunAt}
		if !r.Duplicate {
			b.obs.JobEnqueued(params[i].Queue, params[i].Type)
		}
	}
	if !o.scheduled.IsZero() {
		b.schedule(o.scheduled)
	}
	b.signal()
	return out, o.batch, nil
}

// enqueueBatchWithDeps is EnqueueBatch of specs some of which name parents: one depsOp stores
// the jobs, their edges and their batch.
func (b *Broker) enqueueBatchWithDeps(ctx context.Context, specs []JobSpec, opts *BatchOptions) ([]Enqueued, int64, error) {
	o := newDepsOp(specs)
	if opts != nil {
		o.create = b.createParams(opts, b.now())
	}
	out, err := b.enqueueDeps(ctx, o)
	if err != nil {
		return nil, 0, err
	}
	if opts == nil {
		return out, specs[0].Batch, nil
	}
	return out, o.batch, nil
}

// batchEnqueueOp stores an enqueue into a batch: the jobs, then their place in the batch
// (created first and closed last when the enqueue makes the batch), all or nothing. It writes
// alone (no commit.Inserter grouping), in a part of the transaction that can fail alone: a
// batch closed or missing fails this enqueue only.
type batchEnqueueOp struct {
	*enqueueOp
	create *store.BatchCreateParams // nil: add to batch
	batch  int64
	now    time.Time
	err    error // this enqueue's own failure, the rest of the transaction going on
}

func (o *batchEnqueueOp) Name() string                     { return "batch_enqueue" }
func (o *batchEnqueueOp) Insert() []*store.JobInsertParams { return nil }

func (o *batchEnqueueOp) Apply(tx store.Tx) error {
	o.err = nil
	if o.create != nil {
		o.batch = 0
	}
	err := tx.Isolated(func() error {
		if o.create != nil {
			var err error
			if o.batch, err = tx.BatchCreate(o.create); err != nil {
				return err
			}
		}
		if err := o.enqueueOp.Apply(tx); err != nil {
			return err
		}
		if err := tx.BatchAdd(o.batch, added(o.results)); err != nil {
			return err
		}
		if o.create == nil {
			return nil
		}
		_, err := tx.BatchClose(o.batch, o.now)
		return err
	})
	if iso, ok := errors.AsType[*store.IsolatedError](err); ok {
		o.err = iso.Err
		return nil
	}
	return err
}

// added lists the jobs an insert stored now (not the duplicates of earlier ones).
func added(rs []store.JobInsertResult) []int64 {
	ids := make([]int64, 0, len(rs))
	for _, r := range rs {
		if !r.Duplicate {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// finishesBatch says a result's write makes a batch's job final.
func (o *resultOp) finishesBatch() bool { return o.params.Batch != 0 && o.params.State.Final() }

// batchesWritten runs a dispatch round after a commit that made a batch's job final: it may
// have enqueued the batch's callbacks.
func (b *Broker) batchesWritten(batch []commit.Op, err error) {
	if err != nil {
		return
	}
	for _, o := range batch {
		if r, ok := o.(*resultOp); ok && r.finishesBatch() {
			b.signal()
			return
		}
	}
}

// batchOf is the batch of a job the broker writes (0: none).
func batchOf(j *job.Job) int64 {
	if j == nil {
		return 0
	}
	return j.BatchID
}
