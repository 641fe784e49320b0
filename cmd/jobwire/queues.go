package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runQueuesList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListQueuesResponse, error) {
		return b.admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
	}, func(resp *jobwirev1.ListQueuesResponse) error {
		if len(resp.GetQueues()) == 0 {
			fmt.Fprintln(e.stdout, "no queues yet")
			return nil
		}
		printQueueTable(e.stdout, "", resp.GetQueues())
		return nil
	})
}

// printQueueTable writes one line per queue, each line starting with indent.
func printQueueTable(w io.Writer, indent string, queues []*jobwirev1.QueueInfo) {
	tw := newTable(w)
	row(tw, indent+"QUEUE", "STATUS", "LIMIT", "PENDING", "SCHEDULED", "RUNNING", "DEAD", "OLDEST READY")
	for _, q := range queues {
		depth := depthByShortName(q.GetDepthByState())
		row(tw, indent+display(q.GetName()), queueStatus(q), queueLimit(q), depth["PENDING"], depth["SCHEDULED"], q.GetRunning(),
			depth["DEAD"], fmtDuration(q.GetOldestReadyAge()))
	}
	_ = tw.Flush()
}

// depthByShortName keys the depth map by short state name whether the broker wrote "PENDING"
// or "JOB_STATE_PENDING".
func depthByShortName(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[strings.TrimPrefix(strings.ToUpper(k), "JOB_STATE_")] += v
	}
	return out
}

func queueStatus(q *jobwirev1.QueueInfo) string {
	if q.GetPaused() {
		return "paused"
	}
	return "active"
}

func queueLimit(q *jobwirev1.QueueInfo) string {
	if q.GetConcurrencyLimit() == 0 {
		return "none"
	}
	return strconv.Itoa(int(q.GetConcurrencyLimit()))
}

// queueResponse is what PauseQueue, ResumeQueue and SetQueueLimit all answer.
type queueResponse interface {
	proto.Message
	GetQueue() *jobwirev1.QueueInfo
}

// queueSender sends one queue change.
type queueSender[R queueResponse] func(context.Context, jobwirev1.AdminServiceClient) (R, error)

// runQueueChange runs a command whose positionals start with a queue name: prepare checks the
// positionals and returns the request to send, done words the queue as it now is.
func runQueueChange[R queueResponse](ctx context.Context, e *env, c *command, args []string, names []string,
	prepare func(pos []string) (queueSender[R], error), done func(q *jobwirev1.QueueInfo) string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, names...); err != nil {
		return err
	}
	if pos[0] == "" {
		return usageErrorf("the queue name is empty")
	}
	send, err := prepare(pos)
	if err != nil {
		return err
	}
	err = request(ctx, e, cf, func(ctx context.Context, b *broker) (R, error) { return send(ctx, b.admin) },
		func(resp R) error {
			fmt.Fprintln(e.stdout, done(resp.GetQueue()))
			return nil
		})
	if rpcCode(err) == codes.NotFound {
		// Only pausing creates a queue; resuming or capping a misspelt name must not.
		return fmt.Errorf("queue %q does not exist; queues are made by their first job or by 'jobwire queues pause' (see 'jobwire queues list')", pos[0])
	}
	return err
}

func runQueuesPause(ctx context.Context, e *env, c *command, args []string) error {
	return runQueueChange(ctx, e, c, args, []string{"queue name"},
		func(pos []string) (queueSender[*jobwirev1.PauseQueueResponse], error) {
			return func(ctx context.Context, a jobwirev1.AdminServiceClient) (*jobwirev1.PauseQueueResponse, error) {
				return a.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: pos[0]})
			}, nil
		},
		func(q *jobwirev1.QueueInfo) string {
			return fmt.Sprintf("queue %s is paused; its %d running jobs will finish", display(q.GetName()), q.GetRunning())
		})
}

func runQueuesResume(ctx context.Context, e *env, c *command, args []string) error {
	return runQueueChange(ctx, e, c, args, []string{"queue name"},
		func(pos []string) (queueSender[*jobwirev1.ResumeQueueResponse], error) {
			return func(ctx context.Context, a jobwirev1.AdminServiceClient) (*jobwirev1.ResumeQueueResponse, error) {
				return a.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: pos[0]})
			}, nil
		},
		func(q *jobwirev1.QueueInfo) string { return fmt.Sprintf("queue %s is active", display(q.GetName())) })
}

func runQueuesSetLimit(ctx context.Context, e *env, c *command, args []string) error {
	return runQueueChange(ctx, e, c, args, []string{"queue name", "limit"},
		func(pos []string) (queueSender[*jobwirev1.SetQueueLimitResponse], error) {
			n, err := strconv.ParseInt(pos[1], 10, 32)
			if err != nil || n < 0 {
				return nil, usageErrorf("limit %q is not a whole number of at least 0", pos[1])
			}
			return func(ctx context.Context, a jobwirev1.AdminServiceClient) (*jobwirev1.SetQueueLimitResponse, error) {
				return a.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: pos[0], Limit: int32(n)})
			}, nil
		},
		func(q *jobwirev1.QueueInfo) string {
			if q.GetConcurrencyLimit() == 0 {
				return fmt.Sprintf("queue %s has no concurrency limit", display(q.GetName()))
			}
			return fmt.Sprintf("queue %s runs at most %d jobs at once", display(q.GetName()), q.GetConcurrencyLimit())
		})
}
