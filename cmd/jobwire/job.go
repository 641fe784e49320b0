package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	jwbroker "github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runJobGet(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.GetJobResponse, error) {
		return b.producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	}, func(resp *jobwirev1.GetJobResponse) error {
		printJobWaiting(e.stdout, resp.GetJob(), resp.GetWaiting())
		if len(resp.GetJob().GetAttemptHistory()) > 0 {
			fmt.Fprintln(e.stdout)
			printAttemptTable(e.stdout, resp.GetJob().GetAttemptHistory())
		}
		return nil
	})
}

func runJobCancel(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.CancelJobResponse, error) {
		return b.producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id})
	}, func(resp *jobwirev1.CancelJobResponse) error {
		fmt.Fprintf(e.stdout, "job %d is %s\n", resp.GetJob().GetId(), enumName(resp.GetJob().GetState()))
		return nil
	})
}

func runJobsList(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var state, queue, typ, token string
	var limit int
	fs.StringVar(&state, "state", "", "only jobs in this state (scheduled, pending, leased, running, succeeded, dead, cancelled, waiting)")
	fs.StringVar(&queue, "queue", "", "only jobs of this queue")
	fs.StringVar(&typ, "type", "", "only jobs of this type")
	sf := addSortFlags(fs, jwbroker.JobSortColumns())
	fs.IntVar(&limit, "limit", 0, "jobs per page, 1..1000 (default: the broker's, 100)")
	fs.StringVar(&token, "page-token", "", "continue from a previous page (with the same --sort and --asc)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	req := &jobwirev1.ListJobsRequest{Queue: queue, Type: typ, PageToken: token}
	if req.Sort, req.Ascending, err = sf.build(); err != nil {
		return err
	}
	if state != "" {
		if req.State, err = parseState(state); err != nil {
			return err
		}
	}
	if req.PageSize, err = pageSize(limit); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListJobsResponse, error) {
		return b.admin.ListJobs(ctx, req)
	}, func(resp *jobwirev1.ListJobsResponse) error {
		if len(resp.GetJobs()) == 0 {
			fmt.Fprintln(e.stdout, "no jobs match")
		} else {
			tw := newTable(e.stdout)
			row(tw, "ID", "TYPE", "QUEUE", "STATE", "PRIORITY", "ATTEMPTS", "RUN AT", "CREATED")
			for _, j := range resp.GetJobs() {
				row(tw, j.GetId(), j.GetType(), j.GetQueue(), enumName(j.GetState()), j.GetPriority(),
					attempts(j), fmtTime(j.GetRunAt()), fmtTime(j.GetCreatedAt()))
			}
			_ = tw.Flush()
		}
		printNextPage(e.stderr, resp.GetNextPageToken())
		return nil
	})
}

// parseIDArg parses the flags of a command whose only positional argument is a job id.
func parseIDArg(fs *flag.FlagSet, args []string) (int64, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := positionals(pos, "job ID"); err != nil {
		return 0, err
	}
	return parseID(pos[0])
}

// pageSize checks --limit for listings; 0 leaves the broker's default.
func pageSize(limit int) (int32, error) {
	if limit < 0 || limit > 1000 {
		return 0, usageErrorf("--limit %d is outside 1..1000", limit)
	}
	return int32(limit), nil
}

// printNextPage tells how to fetch the next page, on stderr so stdout stays one table.
func printNextPage(w io.Writer, token string) {
	if token != "" {
		fmt.Fprintf(w, "more jobs: add --page-token %s\n", display(token))
	}
}

func attempts(j *jobwirev1.Job) string {
	if j.GetMaxAttempts() == 0 {
		return fmt.Sprint(j.GetAttempts())
	}
	return fmt.Sprintf("%d/%d", j.GetAttempts(), j.GetMaxAttempts())
}

// printJob writes a job's fields as a two-column list, then its payload.
func printJob(w io.Writer, j *jobwirev1.Job) { printJobWaiting(w, j, nil) }

// printJobWaiting is printJob with the reason the broker gave for a job not running yet.
func printJobWaiting(w io.Writer, j *jobwirev1.Job, waiting *jobwirev1.JobWaiting) {
	tw := newTable(w)
	row(tw, "ID", j.GetId())
	row(tw, "Type", j.GetType())
	row(tw, "Queue", j.GetQueue())
	row(tw, "State", enumName(j.GetState()))
	if j.GetState() == jobwirev1.JobState_JOB_STATE_DEAD {
		row(tw, "Dead reason", enumName(j.GetDeadReason()))
	}
	if waiting.GetReason() != jobwirev1.WaitReason_WAIT_REASON_UNSPECIFIED {
		row(tw, "Waiting", waiting.GetDetail())
	}
	row(tw, "Priority", j.GetPriority())
	row(tw, "Attempts", attempts(j))
	row(tw, "Run at", fmtTime(j.GetRunAt()))
	row(tw, "Created at", fmtTime(j.GetCreatedAt()))
	row(tw, "Finished at", fmtTime(j.GetFinishedAt()))
	row(tw, "Attempt timeout", fmtDuration(j.GetAttemptTimeout()))
	row(tw, "Idempotency key", orDash(j.GetIdempotencyKey()))
	if j.GetUniqueKey() != "" {
		row(tw, "Unique key", uniqueKeyLine(j))
	}
	if k := j.GetConcurrencyKey(); k != "" {
		row(tw, "Concurrency key", fmt.Sprintf("%s (at most %d running)", display(k), j.GetConcurrencyLimit()))
	}
	if j.GetLastErrorType() != "" || j.GetLastErrorMessage() != "" {
		row(tw, "Last error", oneLine(lastError(j), 200))
	}
	if p := j.GetProgress(); p != nil {
		row(tw, "Progress", progressLine(p))
	}
	printDeps(tw, j.GetDependencies())
	_ = tw.Flush()
	printBytes(w, "Payload", j.GetPayload())
	if j.GetState() == jobwirev1.JobState_JOB_STATE_SUCCEEDED {
		printBytes(w, "Result", j.GetResult())
	}
}

// printBytes shows a payload or a result in full under its title: JSON as it was sent, other
// bytes with whatever is not printable escaped.
func printBytes(w io.Writer, title string, p []byte) {
	if len(p) == 0 {
		fmt.Fprintf(w, "\n%s: none\n", title)
		return
	}
	kind := "JSON"
	if !json.Valid(p) {
		kind = "not JSON"
	}
	fmt.Fprintf(w, "\n%s (%d bytes, %s):\n", title, len(p), kind)
	displayLines(w, "", string(p))
}

func lastError(j *jobwirev1.Job) string {
	switch {
	case j.GetLastErrorType() == "":
		return j.GetLastErrorMessage()
	case j.GetLastErrorMessage() == "":
		return j.GetLastErrorType()
	}
	return j.GetLastErrorType() + ": " + j.GetLastErrorMessage()
}

// printAttemptTable writes one line per attempt; messages are cut to fit.
func printAttemptTable(w io.Writer, history []*jobwirev1.Attempt) {
	tw := newTable(w)
	row(tw, "ATTEMPT", "OUTCOME", "KIND", "WORKER", "STARTED", "DURATION", "ERROR")
	for _, a := range history {
		row(tw, a.GetNumber(), enumName(a.GetOutcome()), enumName(a.GetFailureKind()), orDash(a.GetWorkerId()),
			fmtTime(a.GetStartedAt()), attemptDuration(a), orDash(oneLine(attemptError(a), 80)))
	}
	_ = tw.Flush()
}

func attemptError(a *jobwirev1.Attempt) string {
	switch {
	case a.GetErrorType() == "":
		return a.GetMessage()
	case a.GetMessage() == "":
		return a.GetErrorType()
	}
	return a.GetErrorType() + ": " + a.GetMessage()
}

func attemptDuration(a *jobwirev1.Attempt) string {
	if a.GetStartedAt() == nil || a.GetFinishedAt() == nil {
		return "-"
	}
	return roundDuration(a.GetFinishedAt().AsTime().Sub(a.GetStartedAt().AsTime()))
}
