package main

import (
	"context"
	"fmt"
	"strconv"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// The commands on a job that waits to run: job run-now, retry-now, delete and priority. The
// broker checks the job's state in its write; a job in another state is refused with a
// sentence naming it (FAILED_PRECONDITION, exit 1).

func runJobRunNow(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.RunJobNowResponse, error) {
		return b.admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: id})
	}, func(resp *jobwirev1.RunJobNowResponse) error {
		printReady(e, resp.GetJob())
		return nil
	})
}

func runJobRetryNow(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.RetryJobNowResponse, error) {
		return b.admin.RetryJobNow(ctx, &jobwirev1.RetryJobNowRequest{Id: id})
	}, func(resp *jobwirev1.RetryJobNowResponse) error {
		printReady(e, resp.GetJob())
		return nil
	})
}

// printReady says what became of a job made ready now: PENDING, or already handed to a worker.
func printReady(e *env, j *jobwirev1.Job) {
	fmt.Fprintf(e.stdout, "job %d is %s (attempts %s)\n", j.GetId(), enumName(j.GetState()), attempts(j))
}

func runJobDelete(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.DeleteJobResponse, error) {
		return b.admin.DeleteJob(ctx, &jobwirev1.DeleteJobRequest{Id: id})
	}, func(resp *jobwirev1.DeleteJobResponse) error {
		fmt.Fprintf(e.stdout, "job %d deleted (it was %s)\n", resp.GetJob().GetId(), enumName(resp.GetJob().GetState()))
		return nil
	})
}

func runJobPriority(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "job ID", "priority"); err != nil {
		return err
	}
	id, err := parseID(pos[0])
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(pos[1])
	if err != nil || p < minPriority || p > maxPriority {
		return usageErrorf("priority %q is not a whole number in %d..%d", pos[1], minPriority, maxPriority)
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.SetJobPriorityResponse, error) {
		return b.admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: id, Priority: int32(p)})
	}, func(resp *jobwirev1.SetJobPriorityResponse) error {
		j := resp.GetJob()
		fmt.Fprintf(e.stdout, "job %d has priority %d (%s)\n", j.GetId(), j.GetPriority(), enumName(j.GetState()))
		return nil
	})
}
