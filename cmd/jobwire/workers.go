package main

import (
	"context"
	"fmt"
	"strings"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// runWorkers lists the connected worker streams: the same AdminService.ListWorkers the
// dashboard's workers page shows.
func runWorkers(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListWorkersResponse, error) {
		return b.admin.ListWorkers(ctx, &jobwirev1.ListWorkersRequest{})
	}, func(resp *jobwirev1.ListWorkersResponse) error {
		if len(resp.GetWorkers()) == 0 {
			fmt.Fprintln(e.stdout, "no workers connected")
			return nil
		}
		tw := newTable(e.stdout)
		row(tw, "WORKER", "SESSION", "TYPES", "QUEUES", "SLOTS USED", "RUNNING", "DRAINING", "CONNECTED")
		for _, w := range resp.GetWorkers() {
			queues := strings.Join(w.GetQueues(), ",")
			if queues == "" {
				queues = "(all)"
			}
			row(tw, w.GetWorkerId(), w.GetSessionId(), strings.Join(w.GetJobTypes(), ","), queues,
				fmt.Sprintf("%d/%d", w.GetLeasesHeld(), w.GetCapacity()), w.GetRunning(), w.GetDraining(),
				fmtTime(w.GetConnectedAt()))
		}
		return tw.Flush()
	})
}
