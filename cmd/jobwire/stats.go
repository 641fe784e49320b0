package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runStats(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.GetStatsResponse, error) {
		return b.admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
	}, func(resp *jobwirev1.GetStatsResponse) error {
		printStats(e.stdout, resp)
		return nil
	})
}

// printStats writes the counts by state, then each further section only when the broker
// reported something for it.
func printStats(w io.Writer, resp *jobwirev1.GetStatsResponse) {
	fmt.Fprintln(w, "Jobs by state:")
	if len(resp.GetCounts()) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw := newTable(w)
		row(tw, "  QUEUE", "TYPE", "STATE", "COUNT")
		for _, sc := range resp.GetCounts() {
			row(tw, "  "+sc.GetQueue(), sc.GetType(), enumName(sc.GetState()), sc.GetCount())
		}
		_ = tw.Flush()
	}
	if len(resp.GetRecent()) > 0 {
		fmt.Fprintln(w, "\nRecent attempts:")
		tw := newTable(w)
		row(tw, "  WINDOW", "SUCCEEDED", "FAILED", "DEAD")
		for _, r := range resp.GetRecent() {
			row(tw, "  "+fmtDuration(r.GetWindow()), r.GetSucceeded(), r.GetFailed(), r.GetDead())
		}
		_ = tw.Flush()
	}
	if len(resp.GetQueues()) > 0 {
		fmt.Fprintln(w, "\nQueues:")
		printQueueTable(w, "  ", resp.GetQueues())
	}
	printConcurrencyStats(w, resp.GetConcurrency())
	if len(resp.GetRateLimits()) > 0 {
		fmt.Fprintln(w, "\nRate limits:")
		printRateLimitTable(w, "  ", resp.GetRateLimits())
	}
	if len(resp.GetStorageRetries()) > 0 {
		fmt.Fprintln(w, "\nStorage retries:")
		tw := newTable(w)
		for _, k := range sortedKeys(resp.GetStorageRetries()) {
			row(tw, "  "+k, resp.GetStorageRetries()[k])
		}
		_ = tw.Flush()
	}
}

func runPurgeSucceeded(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var olderThan time.Duration
	fs.Var(durationValue{&olderThan}, "older-than", "delete succeeded jobs that finished longer ago than this, e.g. 7d (required)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	if olderThan <= 0 {
		return usageErrorf("--older-than is required and must be positive, e.g. --older-than 7d")
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.PurgeFinishedJobsResponse, error) {
		return b.admin.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(olderThan)})
	}, func(resp *jobwirev1.PurgeFinishedJobsResponse) error {
		fmt.Fprintf(e.stdout, "purged %d succeeded jobs that finished more than %s ago\n", resp.GetPurged(), roundDuration(olderThan))
		return nil
	})
}
