package client

import (
	"context"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// Operations on a job that waits to run. Each changes the job only while it is in the state
// the operation needs, checked by the broker in its write; a job in another state (leased by a
// worker meanwhile, say) is left alone and the error matches ErrFailedPrecondition, its message
// naming the state. A job that does not exist matches ErrNotFound.

// RunJobNow makes a SCHEDULED job ready now and returns it as it now is.
func (c *Client) RunJobNow(ctx context.Context, id int64) (*job.Job, error) {
	resp, err := c.admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: id})
	if err != nil {
		return nil, wrapErr("RunJobNow", err)
	}
	return jobFromProto(resp.GetJob()), nil
}

// RetryJobNow ends the backoff of a job waiting to retry (SCHEDULED after a failed attempt).
func (c *Client) RetryJobNow(ctx context.Context, id int64) (*job.Job, error) {
	resp, err := c.admin.RetryJobNow(ctx, &jobwirev1.RetryJobNowRequest{Id: id})
	if err != nil {
		return nil, wrapErr("RetryJobNow", err)
	}
	return jobFromProto(resp.GetJob()), nil
}

// DeleteJob deletes a PENDING or SCHEDULED job and returns it as it was.
func (c *Client) DeleteJob(ctx context.Context, id int64) (*job.Job, error) {
	resp, err := c.admin.DeleteJob(ctx, &jobwirev1.DeleteJobRequest{Id: id})
	if err != nil {
		return nil, wrapErr("DeleteJob", err)
	}
	return jobFromProto(resp.GetJob()), nil
}

// SetJobPriority changes the priority (-1000..1000) of a PENDING or SCHEDULED job.
func (c *Client) SetJobPriority(ctx context.Context, id int64, priority int) (*job.Job, error) {
	p, err := toInt32("SetJobPriority", "priority", priority)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: id, Priority: p})
	if err != nil {
		return nil, wrapErr("SetJobPriority", err)
	}
	return jobFromProto(resp.GetJob()), nil
}
