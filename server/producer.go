package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/stages"
)

type producer struct {
	*Server
	jobwirev1.UnimplementedProducerServiceServer
}

// validate checks a unary request; requests without rules pass.
func (s *Server) validate(req any) error {
	now := s.clk.Now()
	if ok, err := s.limits.validateBatchRequest(req, now); ok || err != nil {
		return err
	}
	switch r := req.(type) {
	case *jobwirev1.EnqueueRequest:
		return s.limits.validateSpec("job", r.GetJob(), now)
	case *jobwirev1.EnqueueGraphRequest:
		return s.limits.validateGraph(r, now)
	case *jobwirev1.GetGraphRequest:
		return validID("graph_id", r.GetGraphId())
	case *jobwirev1.CancelGraphRequest:
		return validID("graph_id", r.GetGraphId())
	case *jobwirev1.EnqueueBatchRequest:
		n := len(r.GetJobs())
		if n == 0 || n > s.limits.MaxBatch {
			return invalid("jobs", "must hold 1..%d jobs, got %d", s.limits.MaxBatch, n)
		}
		for i, spec := range r.GetJobs() {
			if err := s.limits.validateSpec(fmt.Sprintf("jobs[%d]", i), spec, now); err != nil {
				return err
			}
		}
	case *jobwirev1.GetJobRequest:
		return validID("id", r.GetId())
	case *jobwirev1.CancelJobRequest:
		return validID("id", r.GetId())
	case *jobwirev1.RunJobNowRequest, *jobwirev1.RetryJobNowRequest, *jobwirev1.DeleteJobRequest,
		*jobwirev1.SetJobPriorityRequest:
		_, err := validateWaiting(req)
		return err
	case *jobwirev1.ResetBreakerRequest:
		return validName("type", r.GetType())
	case *jobwirev1.ForceBreakerRequest:
		if err := validName("type", r.GetType()); err != nil {
			return err
		}
		if _, ok := breakerStateFromProto[r.GetState()]; !ok {
			return invalid("state", "must be BREAKER_STATE_CLOSED, BREAKER_STATE_OPEN or BREAKER_STATE_HALF_OPEN, got %s", r.GetState())
		}
	}
	return s.validateAdmin(req, now)
}

// jobSpecFromProto is the broker's spec of a validated request's job; the broker fills
// what the producer left out.
func jobSpecFromProto(spec *jobwirev1.JobSpec) broker.JobSpec {
	out := broker.JobSpec{
		Type:           spec.GetType(),
		Queue:          spec.GetQueue(),
		Payload:        spec.GetPayload(),
		Priority:       int(spec.GetPriority()),
		MaxAttempts:    int(spec.GetMaxAttempts()),
		IdempotencyKey: spec.GetIdempotencyKey(),
		AttemptTimeout: spec.GetAttemptTimeout().AsDuration(),
		Metadata:       spec.GetMetadata(),
		Unique:         uniqueFromProto(spec.GetUnique()),
		Deps:           depsSpecFromProto(spec),

		ConcurrencyKey:   spec.GetConcurrencyKey(),
		ConcurrencyLimit: int(spec.GetConcurrencyLimit()),
		Batch:            spec.GetBatchId(),
		RateKey:          spec.GetRateKey(),
	}
	switch sched := spec.GetSchedule().(type) {
	case *jobwirev1.JobSpec_RunAt:
		out.RunAt = sched.RunAt.AsTime()
	case *jobwirev1.JobSpec_Delay:
		out.Delay = sched.Delay.AsDuration()
	}
	return out
}

func enqueuedToProto(r broker.Enqueued) *jobwirev1.EnqueuedJob {
	return &jobwirev1.EnqueuedJob{Id: r.ID, Duplicate: r.Duplicate, State: stateToProto(r.State), RunAt: ts(r.RunAt),
		DuplicateBy: duplicateBy(r)}
}

func (p *producer) Enqueue(ctx context.Context, req *jobwirev1.EnqueueRequest) (*jobwirev1.EnqueueResponse, error) {
	stages.Mark(stages.Handler)
	res, err := p.b.Enqueue(ctx, []broker.JobSpec{jobSpecFromProto(req.GetJob())})
	if err != nil {
		return nil, depsStatus(err)
	}
	stages.Mark(stages.Replied)
	return &jobwirev1.EnqueueResponse{Job: enqueuedToProto(res[0])}, nil
}

func (p *producer) EnqueueBatch(ctx context.Context, req *jobwirev1.EnqueueBatchRequest) (*jobwirev1.EnqueueBatchResponse, error) {
	specs := make([]broker.JobSpec, len(req.GetJobs()))
	for i, spec := range req.GetJobs() {
		specs[i] = jobSpecFromProto(spec)
	}
	if req.GetBatch() != nil {
		return p.enqueueIntoBatch(ctx, req, specs)
	}
	res, err := p.b.Enqueue(ctx, specs)
	var conflict *broker.IdempotencyConflictError
	if errors.As(err, &conflict) {
		// The batch is all or nothing: name the spec that stopped it.
		return nil, status.Errorf(codes.AlreadyExists, "jobs[%d]: %v; no job of this batch was stored", conflict.Index, err)
	}
	if err != nil {
		return nil, depsStatus(err)
	}
	out := &jobwirev1.EnqueueBatchResponse{Jobs: make([]*jobwirev1.EnqueuedJob, len(res))}
	for i, r := range res {
		out.Jobs[i] = enqueuedToProto(r)
	}
	return out, nil
}

func (p *producer) GetJob(ctx context.Context, req *jobwirev1.GetJobRequest) (*jobwirev1.GetJobResponse, error) {
	j, err := p.b.Get(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.GetJobResponse{Job: jobToProto(j), Waiting: waitingToProto(p.b.WhyPending(j))}
	if err := p.withDeps(ctx, j, out); err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

func (p *producer) CancelJob(ctx context.Context, req *jobwirev1.CancelJobRequest) (*jobwirev1.CancelJobResponse, error) {
	j, err := p.b.Cancel(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.CancelJobResponse{Job: jobToProto(j)}, nil
}
