package main

import (
	"context"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// runBrokers lists the brokers that serve the database (AdminService.ListBrokers): on
// PostgreSQL every broker seen in the last week, with the leader, the worker streams each
// served when last seen, and the one that answered marked; on SQLite the one broker.
func runBrokers(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListBrokersResponse, error) {
		return b.admin.ListBrokers(ctx, &jobwirev1.ListBrokersRequest{})
	}, func(resp *jobwirev1.ListBrokersResponse) error {
		tw := newTable(e.stdout)
		row(tw, "ID", "ADDRESS", "HOST", "PID", "STARTED", "LAST SEEN", "LEADER", "ALIVE", "WORKERS", "ANSWERED")
		for _, b := range resp.GetBrokers() {
			row(tw, orDash(b.GetId()), orDash(b.GetAddr()), orDash(b.GetHost()), b.GetPid(),
				fmtTime(b.GetStartedAt()), fmtTime(b.GetLastSeen()), b.GetLeader(), b.GetAlive(), b.GetWorkers(), b.GetAnswering())
		}
		return tw.Flush()
	})
}
