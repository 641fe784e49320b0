package client

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// JobSpec describes a job to enqueue. Zero fields take the broker's defaults: the "default"
// queue, priority 0, run now, the type's retry policy and the broker's attempt timeout.
type JobSpec struct {
	// Type names the handler: 1..255 characters of [A-Za-z0-9_.:-].
	Type string
	// Payload is opaque to the broker; by convention JSON.
	Payload []byte
	// Queue groups jobs for pausing and concurrency limits. Empty means "default".
	Queue string
	// Priority: higher runs first, -1000..1000.
	Priority int
	// RunAt schedules the job for an absolute time. Set at most one of RunAt and Delay. A time
	// in the past means now: the broker stores the job as enqueued now, behind the jobs of its
	// priority already waiting.
	RunAt time.Time
	// Delay schedules the job this long after the broker stores it. Measured on the broker's
	// clock, so it is immune to skew between producer and broker.
	Delay time.Duration
	// MaxAttempts counts the first attempt. 0 means the type's policy default.
	MaxAttempts int
	// IdempotencyKey makes a repeated enqueue return the job the first one created.
	IdempotencyKey string
	// AttemptTimeout bounds one attempt. 0 means the broker default.
	AttemptTimeout time.Duration
	// Metadata is stored with the job and handed to its handler (worker.Job.Metadata): at most
	// 64 keys of [A-Za-z0-9_.:-], values up to 4096 bytes. The client adds the W3C trace
	// context of the enqueue ("traceparent", "tracestate").
	Metadata map[string]string
	// Unique, when set, makes the job unique (see UniqueOpts).
	Unique *UniqueOpts
	// DependsOn are ids of jobs this one runs after (deps.go): it waits until every one
	// SUCCEEDED and is cancelled when one goes DEAD or CANCELLED, unless RunIfParentsFail.
	DependsOn []int64
	// RunIfParentsFail runs the job once every parent is final, whatever their outcome.
	RunIfParentsFail bool
	// ConcurrencyKey, with ConcurrencyLimit (at least 1), lets at most that many jobs of the
	// key run at once, across every broker; the others wait their turn, spending no attempt.
	// Empty: the broker's concurrency rules decide (SetConcurrencyRule).
	ConcurrencyKey   string
	ConcurrencyLimit int
	// Batch adds the job to an open batch (CreateBatch); 0: none.
	Batch int64
	// RateKey is the key the job counts under in the keyed rate limits that match it (RateKey,
	// ratelimit.go); empty: the key those limits take from the job.
	RateKey string
}

// EnqueueOption sets an optional field of a job being enqueued.
type EnqueueOption interface {
	applyEnqueue(*JobSpec)
}

type enqueueOptionFunc func(*JobSpec)

func (f enqueueOptionFunc) applyEnqueue(s *JobSpec) { f(s) }

// Queue puts the job on the named queue.
func Queue(name string) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.Queue = name })
}

// Priority sets the job's priority; higher runs first.
func Priority(p int) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.Priority = p })
}

// Delay runs the job d after the broker stores it. It replaces an earlier RunAt.
func Delay(d time.Duration) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.Delay, s.RunAt = d, time.Time{} })
}

// RunAt runs the job at t. It replaces an earlier Delay.
func RunAt(t time.Time) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.RunAt, s.Delay = t, 0 })
}

// MaxAttempts caps the attempts, counting the first.
func MaxAttempts(n int) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.MaxAttempts = n })
}

// IdempotencyKey deduplicates the enqueue: a repeat with the same key and type returns the
// existing job with Duplicate set. Use one whenever an enqueue may be retried after an ambiguous
// failure. Keys are scoped by job type and live as long as their job: once retention or a purge
// deletes it, the key is free again. A repeat whose queue, payload, priority, max attempts or
// attempt timeout differ from the job's fails with ErrIdempotencyConflict (the schedule is not
// compared: a Delay counts from each call).
func IdempotencyKey(key string) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.IdempotencyKey = key })
}

// AttemptTimeout bounds how long one attempt may run.
func AttemptTimeout(d time.Duration) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) { s.AttemptTimeout = d })
}

// Metadata adds a key and value to the job's metadata.
func Metadata(key, value string) EnqueueOption {
	return enqueueOptionFunc(func(s *JobSpec) {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
		s.Metadata[key] = value
	})
}

// NewJobSpec builds a JobSpec from the same options Enqueue takes, for EnqueueBatch.
func NewJobSpec(typ string, payload []byte, opts ...EnqueueOption) JobSpec {
	s := JobSpec{Type: typ, Payload: payload}
	for _, o := range opts {
		o.applyEnqueue(&s)
	}
	return s
}

// EnqueueResult says what became of one enqueued job.
type EnqueueResult struct {
	ID int64
	// Duplicate is true when the idempotency key or the unique key matched an existing job;
	// ID, State and RunAt are that job's.
	Duplicate bool
	// DuplicateByUnique says the unique key (UniqueOpts) matched, not the idempotency key.
	DuplicateByUnique bool
	State             job.State
	RunAt             time.Time
}

// Enqueue stores one job and returns once the broker has committed it.
func (c *Client) Enqueue(ctx context.Context, typ string, payload []byte, opts ...EnqueueOption) (*EnqueueResult, error) {
	const op = "Enqueue"
	spec := NewJobSpec(typ, payload, opts...)
	pb, err := specToProto(op, &spec)
	if err != nil {
		return nil, err
	}
	ctx, span := c.startSend(ctx, []*jobwirev1.JobSpec{pb})
	req := &jobwirev1.EnqueueRequest{Job: pb}
	var resp *jobwirev1.EnqueueResponse
	sent := false
	if c.streams != nil && !carriesMetadata(ctx) {
		resp, sent, err = c.streams.enqueue(ctx, req)
	}
	if !sent {
		resp, err = c.producer.Enqueue(ctx, req)
	}
	if err != nil {
		endSend(span, nil, err)
		return nil, wrapErr(op, err)
	}
	endSend(span, []int64{resp.GetJob().GetId()}, nil)
	r := enqueuedFromProto(resp.GetJob())
	return &r, nil
}

// EnqueueJSON marshals v to JSON and enqueues it as the payload.
func (c *Client) EnqueueJSON(ctx context.Context, typ string, v any, opts ...EnqueueOption) (*EnqueueResult, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("jobwire: EnqueueJSON: encode payload: %w", err)
	}
	return c.Enqueue(ctx, typ, payload, opts...)
}

// EnqueueBatch stores all the jobs in one transaction, or none of them. Results are in the
// order of specs.
func (c *Client) EnqueueBatch(ctx context.Context, specs []JobSpec) ([]EnqueueResult, error) {
	const op = "EnqueueBatch"
	if len(specs) == 0 {
		return nil, nil
	}
	req := &jobwirev1.EnqueueBatchRequest{Jobs: make([]*jobwirev1.JobSpec, len(specs))}
	for i := range specs {
		pb, err := specToProto(fmt.Sprintf("%s[%d]", op, i), &specs[i])
		if err != nil {
			return nil, err
		}
		req.Jobs[i] = pb
	}
	ctx, span := c.startSend(ctx, req.Jobs)
	resp, err := c.producer.EnqueueBatch(ctx, req)
	endSend(span, nil, err)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	if len(resp.GetJobs()) != len(specs) {
		return nil, fmt.Errorf("jobwire: %s: broker answered %d results for %d jobs", op, len(resp.GetJobs()), len(specs))
	}
	out := make([]EnqueueResult, len(specs))
	for i, j := range resp.GetJobs() {
		out[i] = enqueuedFromProto(j)
	}
	return out, nil
}

// Get returns a job with its full attempt history.
func (c *Client) Get(ctx context.Context, id int64) (*job.Job, error) {
	resp, err := c.producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		return nil, wrapErr("Get", err)
	}
	return jobFromProto(resp.GetJob()), nil
}

// Cancel cancels a job that has not finished and returns it as it now is. A running job's
// worker is told to stop. A job that already finished (SUCCEEDED, DEAD, or CANCELLED by an
// earlier call) is left as it is and the error matches ErrFailedPrecondition, its message
// naming the state ("job 2 already SUCCEEDED; nothing to cancel"); a job that does not exist
// matches ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id int64) (*job.Job, error) {
	resp, err := c.producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id})
	if err != nil {
		return nil, wrapErr("Cancel", err)
	}
	return jobFromProto(resp.GetJob()), nil
}

// specToProto checks what only the client can know (both schedules set) and leaves the rest of
// the validation to the broker, which owns the rules.
func specToProto(op string, s *JobSpec) (*jobwirev1.JobSpec, error) {
	if !s.RunAt.IsZero() && s.Delay != 0 {
		return nil, invalidArg(op, "set at most one of RunAt and Delay")
	}
	prio, err := toInt32(op, "Priority", s.Priority)
	if err != nil {
		return nil, err
	}
	maxAttempts, err := toInt32(op, "MaxAttempts", s.MaxAttempts)
	if err != nil {
		return nil, err
	}
	pb := &jobwirev1.JobSpec{
		Type:           s.Type,
		Payload:        s.Payload,
		Queue:          s.Queue,
		Priority:       prio,
		MaxAttempts:    maxAttempts,
		IdempotencyKey: s.IdempotencyKey,
		Metadata:       maps.Clone(s.Metadata),
		RateKey:        s.RateKey,
		BatchId:        s.Batch,
		Unique:         uniqueToProto(s.Unique),
	}
	pb.DependsOn, pb.RunIfParentsFail = s.DependsOn, s.RunIfParentsFail
	if err := concurrencyToProto(op, s, pb); err != nil {
		return nil, err
	}
	switch {
	case !s.RunAt.IsZero():
		pb.Schedule = &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(s.RunAt)}
	case s.Delay != 0:
		pb.Schedule = &jobwirev1.JobSpec_Delay{Delay: durationpb.New(s.Delay)}
	}
	if s.AttemptTimeout != 0 {
		pb.AttemptTimeout = durationpb.New(s.AttemptTimeout)
	}
	return pb, nil
}

// toInt32 narrows an int for the wire, refusing values that would silently wrap.
func toInt32(op, field string, v int) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, invalidArg(op, "%s %d is out of range", field, v)
	}
	return int32(v), nil
}

// carriesMetadata reports whether ctx has gRPC metadata for the call it makes, which a
// request on an enqueue stream could not carry.
func carriesMetadata(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && md.Len() > 0
}
