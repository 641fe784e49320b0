package server

import (
	"context"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// The admin calls that operate on a job waiting to run: run it now, retry it now, delete it,
// change its priority. The broker checks the job's state in the write; a job in another state
// is FAILED_PRECONDITION naming it (toStatus).

// validateWaiting checks the requests of the calls on waiting jobs; handled says req is one.
func validateWaiting(req any) (handled bool, err error) {
	switch r := req.(type) {
	case *jobwirev1.RunJobNowRequest:
		return true, validID("id", r.GetId())
	case *jobwirev1.RetryJobNowRequest:
		return true, validID("id", r.GetId())
	case *jobwirev1.DeleteJobRequest:
		return true, validID("id", r.GetId())
	case *jobwirev1.SetJobPriorityRequest:
		if err := validID("id", r.GetId()); err != nil {
			return true, err
		}
		if p := r.GetPriority(); p < minPriority || p > maxPriority {
			return true, invalid("priority", "must be %d..%d, got %d", minPriority, maxPriority, p)
		}
		return true, nil
	}
	return false, nil
}

func (a *admin) RunJobNow(ctx context.Context, req *jobwirev1.RunJobNowRequest) (*jobwirev1.RunJobNowResponse, error) {
	j, err := a.b.RunNow(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RunJobNowResponse{Job: jobToProto(j)}, nil
}

func (a *admin) RetryJobNow(ctx context.Context, req *jobwirev1.RetryJobNowRequest) (*jobwirev1.RetryJobNowResponse, error) {
	j, err := a.b.RetryNow(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RetryJobNowResponse{Job: jobToProto(j)}, nil
}

func (a *admin) DeleteJob(ctx context.Context, req *jobwirev1.DeleteJobRequest) (*jobwirev1.DeleteJobResponse, error) {
	j, err := a.b.DeleteWaiting(ctx, req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.DeleteJobResponse{Job: jobToProto(j)}, nil
}

func (a *admin) SetJobPriority(ctx context.Context, req *jobwirev1.SetJobPriorityRequest) (*jobwirev1.SetJobPriorityResponse, error) {
	j, err := a.b.SetPriority(ctx, req.GetId(), int(req.GetPriority()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.SetJobPriorityResponse{Job: jobToProto(j)}, nil
}

// uniqueStatesToProto lists a job's unique states as the API names them.
func uniqueStatesToProto(states []job.State) []jobwirev1.JobState {
	var out []jobwirev1.JobState
	for _, s := range states {
		out = append(out, stateToProto(s))
	}
	return out
}
