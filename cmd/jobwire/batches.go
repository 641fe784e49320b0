package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// batchStates are the --state values of batches list.
var batchStates = map[string]jobwirev1.BatchState{
	"open":     jobwirev1.BatchState_BATCH_STATE_OPEN,
	"closed":   jobwirev1.BatchState_BATCH_STATE_CLOSED,
	"complete": jobwirev1.BatchState_BATCH_STATE_COMPLETE,
}

// runBatchesList lists batches with their counts, newest first (AdminService.ListBatches).
func runBatchesList(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var state, token string
	var limit int
	fs.StringVar(&state, "state", "", "only batches in this state (open, closed, complete)")
	fs.IntVar(&limit, "limit", 0, "batches per page, 1..1000 (default: the broker's, 100)")
	fs.StringVar(&token, "page-token", "", "continue from a previous page")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	req := &jobwirev1.ListBatchesRequest{PageToken: token}
	if state != "" {
		st, ok := batchStates[strings.ToLower(state)]
		if !ok {
			return usageErrorf("--state %q is not a batch state: open, closed or complete", state)
		}
		req.State = st
	}
	if req.PageSize, err = pageSize(limit); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListBatchesResponse, error) {
		return b.admin.ListBatches(ctx, req)
	}, func(resp *jobwirev1.ListBatchesResponse) error {
		if len(resp.GetBatches()) == 0 {
			fmt.Fprintln(e.stdout, "no batches match")
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "ID", "STATE", "TOTAL", "PENDING", "SUCCEEDED", "DEAD", "CANCELLED", "CREATED", "DESCRIPTION")
		for _, b := range resp.GetBatches() {
			row(tw, b.GetId(), enumName(b.GetState()), b.GetTotal(), pendingOf(b), b.GetSucceeded(), b.GetDead(),
				b.GetCancelled(), fmtTime(b.GetCreatedAt()), orDash(oneLine(b.GetDescription(), 60)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if t := resp.GetNextPageToken(); t != "" {
			printNextPage(e.stderr, t)
		}
		return nil
	})
}

// runBatchesGet shows one batch: its counts, callbacks and failed jobs (AdminService.GetBatch).
func runBatchesGet(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseBatchIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.GetBatchResponse, error) {
		return b.admin.GetBatch(ctx, &jobwirev1.GetBatchRequest{Id: id})
	}, func(resp *jobwirev1.GetBatchResponse) error {
		printBatch(e.stdout, resp.GetBatch())
		return nil
	})
}

// runBatchesCreate opens a batch and prints its id (ProducerService.CreateBatch).
func runBatchesCreate(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var desc, onSuccess, onComplete, queue, payload string
	fs.StringVar(&desc, "description", "", "what the batch is, shown by batches list and get")
	fs.StringVar(&onSuccess, "on-success", "", "job type enqueued once every job of the batch SUCCEEDED")
	fs.StringVar(&onComplete, "on-complete", "", "job type enqueued once every job of the batch is final")
	fs.StringVar(&queue, "callback-queue", "", "queue of the callbacks (default \"default\")")
	fs.StringVar(&payload, "callback-payload", "", "payload of the callbacks, as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	opts := &jobwirev1.BatchOptions{Description: desc}
	var body []byte
	if flagGiven(fs, "callback-payload") {
		if body, err = parseJSONPayload("callback-payload", payload); err != nil {
			return err
		}
	}
	if onSuccess != "" {
		opts.OnSuccess = &jobwirev1.JobSpec{Type: onSuccess, Queue: queue, Payload: body}
	}
	if onComplete != "" {
		opts.OnComplete = &jobwirev1.JobSpec{Type: onComplete, Queue: queue, Payload: body}
	}
	resp, err := fetch(ctx, cf, func(ctx context.Context, b *broker) (*jobwirev1.CreateBatchResponse, error) {
		return b.producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: opts})
	})
	if err != nil {
		return err
	}
	return show(e, cf, resp, func(resp *jobwirev1.CreateBatchResponse) error {
		fmt.Fprintln(e.stdout, resp.GetBatch().GetId())
		return nil
	})
}

// runBatchesClose closes a batch (ProducerService.CloseBatch).
func runBatchesClose(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	id, err := parseBatchIDArg(fs, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.CloseBatchResponse, error) {
		return b.producer.CloseBatch(ctx, &jobwirev1.CloseBatchRequest{Id: id})
	}, func(resp *jobwirev1.CloseBatchResponse) error {
		b := resp.GetBatch()
		fmt.Fprintf(e.stdout, "batch %d is %s: %d of %d jobs final\n", b.GetId(), enumName(b.GetState()),
			b.GetTotal()-pendingOf(b), b.GetTotal())
		return nil
	})
}

func parseBatchIDArg(fs *flag.FlagSet, args []string) (int64, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	if err := positionals(pos, "batch ID"); err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("batch id %q is not a positive integer", pos[0])
	}
	return id, nil
}

func pendingOf(b *jobwirev1.Batch) int64 {
	return b.GetTotal() - b.GetSucceeded() - b.GetDead() - b.GetCancelled()
}

func printBatch(w io.Writer, b *jobwirev1.Batch) {
	tw := newTable(w)
	row(tw, "ID", b.GetId())
	row(tw, "DESCRIPTION", orDash(oneLine(b.GetDescription(), 200)))
	row(tw, "STATE", enumName(b.GetState()))
	row(tw, "TOTAL", b.GetTotal())
	row(tw, "PENDING", pendingOf(b))
	row(tw, "SUCCEEDED", b.GetSucceeded())
	row(tw, "DEAD", b.GetDead())
	row(tw, "CANCELLED", b.GetCancelled())
	row(tw, "CREATED", fmtTime(b.GetCreatedAt()))
	row(tw, "CLOSED", fmtTime(b.GetClosedAt()))
	row(tw, "COMPLETED", fmtTime(b.GetCompletedAt()))
	row(tw, "ON SUCCESS", callbackOf(b.GetOnSuccessType(), b.GetSuccessJobId()))
	row(tw, "ON COMPLETE", callbackOf(b.GetOnCompleteType(), b.GetCompleteJobId()))
	failed := make([]string, len(b.GetFailedJobIds()))
	for i, id := range b.GetFailedJobIds() {
		failed[i] = strconv.FormatInt(id, 10)
	}
	row(tw, "FAILED JOBS", orDash(strings.Join(failed, ",")))
	_ = tw.Flush()
}

// callbackOf describes a callback: its type and, once enqueued, its job.
func callbackOf(typ string, id int64) string {
	switch {
	case typ == "":
		return "-"
	case id == 0:
		return typ + " (not enqueued)"
	}
	return fmt.Sprintf("%s (job %d)", typ, id)
}
