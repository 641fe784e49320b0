package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// Exit statuses of job wait and job watch, beyond 0 (every job SUCCEEDED), 1 (the broker could
// not be asked) and 2 (bad input), documented in docs/workflows.md.
const (
	exitJobFailed = 3 // a job ended DEAD or CANCELLED
	exitWaitOver  = 4 // --for ran out before every job was final
)

// exitStatus ends a command with a status of its own; msg, when set, goes to stderr.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

// waitFlags are job wait's and job watch's own flags.
type waitFlags struct {
	limit time.Duration // --for: 0 waits as long as it takes
}

func addWaitFlags(fs interface {
	DurationVar(*time.Duration, string, time.Duration, string)
}) *waitFlags {
	wf := &waitFlags{}
	fs.DurationVar(&wf.limit, "for", 0, "give up after this long, with exit status 4 (default: wait as long as it takes)")
	return wf
}

func runJobWait(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	wf := addWaitFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("missing job ID: name at least one job to wait for")
	}
	ids := make([]int64, len(pos))
	for i, p := range pos {
		if ids[i], err = parseID(p); err != nil {
			return err
		}
	}
	return follow(ctx, e, cf, wf, &jobwirev1.WatchJobsRequest{Ids: ids, FinalOnly: true}, printFinal)
}

func runJobWatch(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	wf := addWaitFlags(fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return follow(ctx, e, cf, wf, &jobwirev1.WatchJobsRequest{Ids: []int64{id}}, printChange)
}

// follow runs a WatchJobs call to its end, printing each job as it comes (protobuf JSON, one
// document a job, with --json), and turns how the jobs ended into the exit status.
func follow(ctx context.Context, e *env, cf *commonFlags, wf *waitFlags, req *jobwirev1.WatchJobsRequest,
	text func(io.Writer, *jobwirev1.Job)) error {
	if wf.limit < 0 {
		return usageErrorf("--for must not be negative, got %s", wf.limit)
	}
	b, err := connect(ctx, cf)
	if err != nil {
		return err
	}
	defer b.close()
	if wf.limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wf.limit)
		defer cancel()
	}
	stream, err := b.producer.WatchJobs(ctx, req)
	failed := 0
	for err == nil {
		var resp *jobwirev1.WatchJobsResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		for _, j := range resp.GetJobs() {
			// One JSON document a job, whatever the broker sent together.
			one := &jobwirev1.WatchJobsResponse{Jobs: []*jobwirev1.Job{j}}
			if err := show(e, cf, one, func(*jobwirev1.WatchJobsResponse) error { text(e.stdout, j); return nil }); err != nil {
				return err
			}
			if final(j.GetState()) && j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED {
				failed++
			}
		}
	}
	switch {
	case errors.Is(err, io.EOF) && failed > 0:
		return &exitStatus{code: exitJobFailed}
	case errors.Is(err, io.EOF):
		return nil
	case status.Code(err) == codes.DeadlineExceeded && wf.limit > 0:
		return &exitStatus{code: exitWaitOver, msg: fmt.Sprintf("gave up after %s (--for): not every job is final", wf.limit)}
	}
	return b.explain(ctx, err)
}

// final reports whether a job in state s is done.
func final(s jobwirev1.JobState) bool {
	switch s {
	case jobwirev1.JobState_JOB_STATE_SUCCEEDED, jobwirev1.JobState_JOB_STATE_DEAD, jobwirev1.JobState_JOB_STATE_CANCELLED:
		return true
	}
	return false
}

// printFinal writes how a job ended in one line: its result, or its last error.
func printFinal(w io.Writer, j *jobwirev1.Job) {
	line := fmt.Sprintf("job %d %s", j.GetId(), enumName(j.GetState()))
	switch {
	case j.GetState() == jobwirev1.JobState_JOB_STATE_SUCCEEDED && len(j.GetResult()) > 0:
		line += " result " + oneLine(string(j.GetResult()), 200)
	case j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED && lastError(j) != "":
		line += ": " + oneLine(lastError(j), 200)
	}
	fmt.Fprintln(w, line)
}

// printChange writes a job's state and progress in one line, for job watch.
func printChange(w io.Writer, j *jobwirev1.Job) {
	if final(j.GetState()) {
		printFinal(w, j)
		return
	}
	line := fmt.Sprintf("job %d %s attempts %s", j.GetId(), enumName(j.GetState()), attempts(j))
	if p := j.GetProgress(); p != nil {
		line += " progress " + progressLine(p)
	}
	fmt.Fprintln(w, line)
}
