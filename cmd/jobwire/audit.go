package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

// runAuditList lists the audit trail (AdminService.ListAuditEvents), newest first: who did each
// operator action, what, when, to how many jobs and on which broker.
func runAuditList(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var (
		action, actor, after, before, token string
		since                               time.Duration
		limit                               int
	)
	fs.StringVar(&action, "action", "", "only this action: job.cancel, dlq.requeue, dlq.purge, jobs.purge_succeeded, queue.pause, queue.resume, queue.limit, breaker.reset, breaker.force, token.create, token.revoke or schedule.add, schedule.update, schedule.remove, schedule.pause, schedule.resume, schedule.trigger, schedule.backfill")
	fs.StringVar(&actor, "actor", "", "only actions of the token with this id or name (anonymous: with auth off)")
	fs.Var(durationValue{&since}, "since", "only actions within this long, e.g. 1h or 2d")
	fs.StringVar(&after, "after", "", "only actions at or after this RFC 3339 time")
	fs.StringVar(&before, "before", "", "only actions before this RFC 3339 time")
	fs.IntVar(&limit, "limit", 0, "events per page, 1..1000 (default: the broker's, 100)")
	fs.StringVar(&token, "page-token", "", "continue from a previous page")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}
	req := &jobwirev1.ListAuditEventsRequest{Action: action, Actor: actor, PageToken: token}
	switch {
	case since != 0 && after != "":
		return usageErrorf("give --since or --after, not both")
	case since < 0:
		return usageErrorf("--since must not be negative")
	case since > 0:
		req.Since = timestamppb.New(e.now().Add(-since))
	case after != "":
		t, err := parseTime("after", after)
		if err != nil {
			return err
		}
		req.Since = timestamppb.New(t)
	}
	if before != "" {
		t, err := parseTime("before", before)
		if err != nil {
			return err
		}
		req.Until = timestamppb.New(t)
	}
	if req.Since != nil && req.Until != nil && !req.Since.AsTime().Before(req.Until.AsTime()) {
		return usageErrorf("the time window is empty: --before is not later than --after/--since")
	}
	if req.PageSize, err = pageSize(limit); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListAuditEventsResponse, error) {
		return b.admin.ListAuditEvents(ctx, req)
	}, func(resp *jobwirev1.ListAuditEventsResponse) error {
		if len(resp.GetEvents()) == 0 {
			fmt.Fprintln(e.stdout, "no audit events match")
		} else {
			tw := newTable(e.stdout)
			row(tw, "ID", "TIME", "ACTOR", "TOKEN", "SOURCE", "PEER", "ACTION", "TARGET", "JOBS", "DETAIL", "BROKER")
			for _, ev := range resp.GetEvents() {
				row(tw, ev.GetId(), fmtTime(ev.GetTime()), oneLine(ev.GetActorName(), 40), orDash(ev.GetActorTokenId()),
					orDash(ev.GetSource()), orDash(ev.GetPeer()), ev.GetAction(), orDash(oneLine(ev.GetTarget(), 40)),
					ev.GetCount(), orDash(oneLine(ev.GetDetail(), 80)), orDash(ev.GetBrokerId()))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if t := resp.GetNextPageToken(); t != "" {
			fmt.Fprintf(e.stderr, "more events: add --page-token %s\n", display(t))
		}
		return nil
	})
}
