package main

import (
	"context"
	"fmt"
	"io"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runBreakersList(ctx context.Context, e *env, c *command, args []string) error {
	cf, err := parseCommonOnly(e, c, args)
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ListBreakersResponse, error) {
		return b.admin.ListBreakers(ctx, &jobwirev1.ListBreakersRequest{})
	}, func(resp *jobwirev1.ListBreakersResponse) error {
		if len(resp.GetBreakers()) == 0 {
			fmt.Fprintln(e.stdout, "no breakers yet")
			return nil
		}
		printBreakers(e.stdout, resp.GetBreakers()...)
		return nil
	})
}

func printBreakers(w io.Writer, bs ...*jobwirev1.BreakerInfo) {
	tw := newTable(w)
	row(tw, "TYPE", "STATE", "FAILURES", "OPENED", "NEXT PROBE", "PROBES", "GENERATION")
	for _, br := range bs {
		state := enumName(br.GetState())
		if br.GetDisabled() {
			state = "DISABLED"
		}
		row(tw, br.GetType(), state, br.GetFailuresInWindow(), fmtTime(br.GetOpenedAt()),
			fmtTime(br.GetNextProbeAt()), br.GetProbesInFlight(), br.GetGeneration())
	}
	_ = tw.Flush()
}

func runBreakersReset(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "job type"); err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ResetBreakerResponse, error) {
		return b.admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: pos[0]})
	}, func(resp *jobwirev1.ResetBreakerResponse) error {
		printBreakers(e.stdout, resp.GetBreaker())
		return nil
	})
}

func runBreakersForce(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos, "job type", "state"); err != nil {
		return err
	}
	state, err := parseBreakerState(pos[1])
	if err != nil {
		return err
	}
	return request(ctx, e, cf, func(ctx context.Context, b *broker) (*jobwirev1.ForceBreakerResponse, error) {
		return b.admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: pos[0], State: state})
	}, func(resp *jobwirev1.ForceBreakerResponse) error {
		printBreakers(e.stdout, resp.GetBreaker())
		return nil
	})
}
